// Glue for rendering saved ipywidgets offline with MathJax 3.
// 1. The widget manager is an AMD bundle: tell RequireJS where its files live, so that
//    its fonts and lazily loaded chunks come from this site's _static folder.
// 2. The manager typesets labels with the MathJax 2 API (MathJax.Hub.Queue); give
//    MathJax 3 that method, forwarding to typesetPromise.
(function () {
  var here = document.currentScript ? document.currentScript.src : "";
  var base = here.substring(0, here.lastIndexOf("/") + 1);
  if (window.require && window.require.config) {
    window.require.config({
      paths: { "@jupyter-widgets/html-manager/dist": base + "html-manager/dist" },
    });
  }
  function addHub(mj) {
    if (mj && typeof mj === "object" && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          var el = job && job[2];
          var m = window.MathJax;
          if (m && m.typesetPromise) {
            m.typesetPromise(el ? [el] : undefined).catch(function () {});
          }
        },
      };
    }
    return mj;
  }
  var current = addHub(window.MathJax);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    get: function () { return current; },
    set: function (value) { current = addHub(value); },
  });
})();
