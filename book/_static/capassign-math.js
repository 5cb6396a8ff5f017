/*
 * capassign book: display equations fit the text column. MathJax 3 does not
 * break long formulas into lines, so once it has typeset a page every display
 * equation wider than its box is set in a smaller type, down to half its size
 * (the widest of the book's own equations are written on several lines so
 * that they need no more). Done again when the window changes size.
 * tests/book/test_browser.py checks the result at 1280 and 390 px.
 */
(function () {
  "use strict";
  var SMALLEST = 0.5;  // never below half the equation's own type size

  function fit() {
    var boxes = document.querySelectorAll('.bd-article mjx-container[display="true"]');
    Array.prototype.forEach.call(boxes, function (box) {
      // MathJax sets the container's own size (e.g. 127%); keep it as the full size
      if (box.dataset.caSize === undefined) box.dataset.caSize = box.style.fontSize;
      box.style.fontSize = box.dataset.caSize;
      var math = box.querySelector("mjx-math");
      if (!math || box.clientWidth === 0) return;
      var need = math.getBoundingClientRect().width;
      if (need <= box.clientWidth) return;
      var scale = Math.max(SMALLEST, (box.clientWidth - 2) / need);
      box.style.fontSize = (parseFloat(getComputedStyle(box).fontSize) * scale).toFixed(2) + "px";
    });
  }

  function whenTypeset(tries) {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      // again once the web fonts are in: they change the widths measured
      mj.startup.promise.then(fit).then(function () { return document.fonts.ready; }).then(fit);
      return;
    }
    if (tries > 0) setTimeout(function () { whenTypeset(tries - 1); }, 100);
  }

  window.capassignFitMath = fit;
  function start() {
    if (document.querySelector(".math")) whenTypeset(200);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(fit, 100);
  });
})();
