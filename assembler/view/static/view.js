// capsem view: live pages reload when their session changes; an exported file shows one page at a time.
(function () {
  "use strict";
  var live = document.body.getAttribute("data-live");
  if (live) {
    var last = null;
    var poll = function () {
      fetch(live, { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (state) {
        var now = JSON.stringify(state);
        if (last !== null && now !== last) { location.reload(); return; }
        last = now;
        if (state.status === "running") { setTimeout(poll, 2000); } else if (last !== null && state.status) { location.reload(); }
      }).catch(function () { setTimeout(poll, 5000); });
    };
    poll();
  }
  var pages = document.querySelectorAll("section.page");
  if (pages.length) {
    var show = function () {
      var target = document.getElementById(decodeURIComponent(location.hash.slice(1)) || "session");
      var page = target && target.closest ? target.closest("section.page") : null;
      if (!page) { page = document.getElementById("session"); }
      pages.forEach(function (p) { p.hidden = p !== page; });
      if (target && target !== page) { target.scrollIntoView(); } else { window.scrollTo(0, 0); }
    };
    window.addEventListener("hashchange", show);
    show();
  }
})();
