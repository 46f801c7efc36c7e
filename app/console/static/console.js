// Switchboard console: a little progressive enhancement. Every page works without it.
// - a form with data-confirm asks before it is sent (destructive actions);
// - "/" moves the focus to the page's search field, when there is one;
// - a read-only field with data-select-all selects its text on focus (the new key).
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
  // A hook for live refresh over the event stream (app/events), once it lands: pages that
  // want it carry data-live on <main>; nothing subscribes yet.
  window.switchboardConsole = { liveRefresh: null };
})();
