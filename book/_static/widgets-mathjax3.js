// ipywidgets' html-manager typesets widget labels with the MathJax 2 API (MathJax.Hub.Queue), but
// the book runs MathJax 3, which has no Hub: rendering a widget would throw a TypeError. Give
// MathJax 3 a Hub whose Queue typesets with MathJax 3. Loaded just before the widget manager,
// which renders on "load"; MathJax 3 replaces window.MathJax when its (deferred) script runs.
(function () {
  function install() {
    var mj = window.MathJax;
    if (!mj || mj.Hub || !mj.startup) return;
    mj.Hub = {
      Queue: function (command) {
        var element = command && command[2];
        mj.startup.promise
          .then(function () { return mj.typesetPromise(element ? [element] : undefined); })
          .catch(function (err) { console.warn("MathJax could not typeset a widget label:", err); });
      },
    };
  }
  install();
  document.addEventListener("DOMContentLoaded", install);
  window.addEventListener("load", install);
})();
