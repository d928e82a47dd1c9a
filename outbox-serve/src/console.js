/* The console's only script (served from /console/static/console.js; the CSP allows no
   inline script). A page whose <main> has data-refresh="N" re-fetches itself every N
   seconds and swaps in the new <main>: not while the tab is hidden, not while a form in it
   has focus or has been changed, and not after "Pause refresh". Without it every page
   still works; it just does not refresh. */
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  var toggle = document.getElementById("refresh-toggle");
  if (!main) { return; }
  var every = Math.max(5, parseInt(main.getAttribute("data-refresh"), 10) || 15) * 1000;
  var paused = false;
  var dirty = false;
  main.addEventListener("input", function () { dirty = true; });
  main.addEventListener("change", function () { dirty = true; });
  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "Resume refresh" : "Pause refresh";
      toggle.setAttribute("aria-pressed", paused ? "true" : "false");
    });
  }
  function busy() {
    var a = document.activeElement;
    return dirty || (a && a !== document.body && main.contains(a) &&
      /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName));
  }
  function refresh() {
    if (paused || document.hidden || busy()) { return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok && !r.redirected ? r.text() : null; })
      .then(function (text) {
        if (text === null || paused || busy()) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main[data-refresh]");
        if (fresh) {
          main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes)
            .map(function (n) { return document.adoptNode(n); }));
          main.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () { /* offline for a moment: try again next time */ });
  }
  window.setInterval(refresh, every);
})();
