// Switchboard console: a little progressive enhancement. Every page works without it.
// - a form with data-confirm asks before it is sent (destructive actions);
// - "/" moves the focus to the page's search field, when there is one;
// - a read-only field with data-select-all selects its text on focus (the new key);
// - the overview, a session, the tasks, a task and the dead letters refresh themselves over
//   the event stream (data-live, below).
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
  // Live refresh: a page whose <main> carries data-live listens to that event stream
  // (GET /console/events or a session's /console/sessions/{id}/events; the session cookie
  // signs it) and, when an event of data-live-types arrives (and, with data-live-match
  // "field=value", whose payload has that field with that value), fetches the page again
  // and swaps each element marked data-live-region for the fresh one. At most one refresh
  // per THROTTLE_MS; events that arrive meanwhile are folded into the next one. A region in
  // which the operator is typing (a focused field, or one whose value was changed) is left
  // alone and refreshed once the focus has left it and the form was sent or cleared.
  var THROTTLE_MS = 2000;
  function editing(region) {
    var active = document.activeElement;
    if (active && active !== document.body && region.contains(active) &&
        (active.tagName === "INPUT" || active.tagName === "TEXTAREA" ||
         active.tagName === "SELECT" || active.isContentEditable)) {
      return true;
    }
    var fields = region.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var field = fields[i];
      if (field.type === "hidden") { continue; }
      if (field.tagName === "SELECT") {
        for (var j = 0; j < field.options.length; j++) {
          if (field.options[j].selected !== field.options[j].defaultSelected) { return true; }
        }
      } else if (field.type === "checkbox" || field.type === "radio") {
        if (field.checked !== field.defaultChecked) { return true; }
      } else if (field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }
  function liveRefresh(main) {
    var url = main.getAttribute("data-live");
    var types = (main.getAttribute("data-live-types") || "").split(",");
    var match = (main.getAttribute("data-live-match") || "").split("=");
    var status = document.getElementById("live-status");
    var last = 0;
    var timer = null;
    var busy = false;
    var held = false;
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
          held = false;
          document.querySelectorAll("[data-live-region]").forEach(function (region) {
            var next = region.id && fresh.getElementById(region.id);
            if (!next) { return; }
            if (editing(region)) { held = true; return; }
            // Keep open what the operator opened (a memory's content, the unified diff).
            var opened = [];
            region.querySelectorAll("details").forEach(function (d, i) { if (d.open) { opened.push(i); } });
            var copy = document.importNode(next, true);
            var details = copy.querySelectorAll("details");
            opened.forEach(function (i) { if (details[i]) { details[i].open = true; } });
            region.replaceWith(copy);
          });
          say(held ? "Live: a form is being filled in; its part of the page waits." :
            "Live: updated at " + new Date().toLocaleTimeString() + ".");
        })
        .catch(function () { say("Live refresh failed; reload the page."); })
        .then(function () { busy = false; });
    }
    function schedule() {
      if (timer !== null) { return; }
      timer = window.setTimeout(refresh, Math.max(0, last + THROTTLE_MS - Date.now()));
    }
    function heard(event) {
      if (match.length === 2 && match[0]) {
        var payload;
        try { payload = JSON.parse(event.data).payload || {}; } catch (e) { return; }
        if (String(payload[match[0]]) !== match[1]) { return; }
      }
      schedule();
    }
    // A held region is tried again when the focus leaves a field (after a send or a clear).
    document.addEventListener("focusout", function () {
      if (held) { window.setTimeout(function () { if (held) { schedule(); } }, 0); }
    });
    var source = new window.EventSource(url);
    types.forEach(function (type) {
      if (type) { source.addEventListener(type, heard); }
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
