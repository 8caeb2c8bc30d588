// MathJax settings for the pymdownx.arithmatex "generic" output (\( \) inline, \[ \] display),
// re-typeset on every page change of Material's instant navigation.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true },
  options: { processHtmlClass: "arithmatex", ignoreHtmlClass: ".*" },
};
if (typeof document$ !== "undefined") {
  document$.subscribe(() => { if (window.MathJax && MathJax.typesetPromise) MathJax.typesetPromise(); });
}
