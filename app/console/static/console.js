// Switchboard console: a little progressive enhancement. Every page works without it.
// - a form with data-confirm asks before it is sent (destructive actions);
// - "/" moves the focus to the page's search field, when there is one;
// - a read-only field with data-select-all selects its text on focus (the new key);
// - the overview refreshes itself over the event stream (data-live, below).
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    var typing = target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" ||
      target.tagName === "SELECT" || target.isContentEditable);
    if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
      var search = document.querySelector("[data-search]");
      if (search) {
        event.preventDefault();
        search.focus();
      }
    }
  });
  document.addEventListener("focusin", function (event) {
    if (event.target && event.target.hasAttribute && event.target.hasAttribute("data-select-all")) {
      event.target.select();
    }
  });
  // Live refresh: a page whose <main> carries data-live (the overview) listens to the
  // console's event stream (GET /console/events, the session cookie signs it) and, when an
  // event of data-live-types arrives, fetches the page again and swaps each element marked
  // data-live-region for the fresh one. At most one refresh per THROTTLE_MS; events that
  // arrive meanwhile are folded into the next one.
  var THROTTLE_MS = 2000;
  function liveRefresh(main) {
    var url = main.getAttribute("data-live");
    var types = (main.getAttribute("data-live-types") || "").split(",");
    var status = document.getElementById("live-status");
    var last = 0;
    var timer = null;
    var busy = false;
    function say(text) {
      if (status) { status.textContent = text; }
    }
    function refresh() {
      timer = null;
      if (busy) { schedule(); return; }
      busy = true;
      last = Date.now();
      window.fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (answer) {
          if (!answer.ok || answer.redirected) { throw new Error("status " + answer.status); }
          return answer.text();
        })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html");
          document.querySelectorAll("[data-live-region]").forEach(function (region) {
            var next = region.id && fresh.getElementById(region.id);
            if (next) { region.replaceWith(document.importNode(next, true)); }
          });
          say("Live: updated at " + new Date().toLocaleTimeString() + ".");
        })
        .catch(function () { say("Live refresh failed; reload the page."); })
        .then(function () { busy = false; });
    }
    function schedule() {
      if (timer !== null) { return; }
      timer = window.setTimeout(refresh, Math.max(0, last + THROTTLE_MS - Date.now()));
    }
    var source = new window.EventSource(url);
    types.forEach(function (type) {
      if (type) { source.addEventListener(type, schedule); }
    });
    source.addEventListener("open", function () { say("Live: listening for changes."); });
    source.addEventListener("error", function () {
      // EventSource reconnects by itself (with Last-Event-ID); a CLOSED one gave up
      // (the session ended: the stream answered with the sign-in page).
      say(source.readyState === window.EventSource.CLOSED ?
        "Live refresh stopped; reload the page." : "Live: reconnecting…");
    });
    return source;
  }
  var main = document.querySelector("main[data-live]");
  window.switchboardConsole = {
    liveRefresh: main && window.EventSource ? liveRefresh(main) : null
  };
})();
