// Hindsight inspector: small progressive enhancements; every page works without them.
(function () {
  "use strict";
  // "/" focuses the search box.
  document.addEventListener("keydown", function (ev) {
    var q = document.getElementById("q");
    var tag = (ev.target && ev.target.tagName) || "";
    if (ev.key === "/" && q && !/INPUT|TEXTAREA|SELECT/.test(tag)) {
      ev.preventDefault();
      q.focus();
    }
  });
  // A character counter on the lesson field (the server enforces the real limit).
  document.querySelectorAll(".counter[data-for]").forEach(function (counter) {
    var field = document.getElementById(counter.getAttribute("data-for"));
    if (!field) { return; }
    var limit = parseInt(document.body.getAttribute("data-lesson-max") || "0", 10);
    function update() {
      var n = Array.from(field.value.trim()).length;
      counter.textContent = limit ? n + " / " + limit : n + " characters";
      counter.classList.toggle("over", limit > 0 && n > limit);
    }
    field.addEventListener("input", update);
    update();
  });
})();
