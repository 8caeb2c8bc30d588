// prmsearch view: draws one search tree from the JSON in #tree-data. No network, no library.
// Layout: a tidy top-down tree; leaves take consecutive columns in depth-first order and a parent
// sits midway over its first and last visible child, recomputed whenever a subtree is folded.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const BOX_W = 150, BOX_H = 40, COL_W = 170, ROW_H = 84, STEP_CHARS = 21, READABLE = 0.6;
  const data = JSON.parse(document.getElementById("tree-data").textContent);
  const meta = data.meta || {};
  const col = data.nodes;
  const N = col.parent.length;

  // ------------------------------------------------------------------ structure
  const kids = Array.from({ length: N }, () => []);
  const roots = [];
  for (let i = 0; i < N; i++) {
    const p = col.parent[i];
    if (p >= 0 && p < N) kids[p].push(i); else roots.push(i);
  }
  const order = [];  // breadth-first: every parent before its children
  for (let q = roots.slice(), h = 0; h < q.length; h++) {
    order.push(q[h]);
    for (const k of kids[q[h]]) q.push(k);
  }
  const below = new Int32Array(N);      // descendants of each node
  const reaches = new Uint8Array(N);    // a terminal node in its subtree
  for (let j = order.length - 1; j >= 0; j--) {
    const i = order[j];
    if (col.terminal[i]) reaches[i] = 1;
    for (const k of kids[i]) { below[i] += below[k] + 1; if (reaches[k]) reaches[i] = 1; }
  }
  // dimmed: the search stopped expanding it, or nothing below it ever finished
  const dim = (i) => Boolean(col.pruned[i]) || !reaches[i];

  // ------------------------------------------------------------------ colours
  const STOPS = [[0, [215, 48, 39]], [0.5, [254, 224, 139]], [1, [26, 152, 80]]];
  function colour(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "#c8c8c8";
    const x = Math.min(1, Math.max(0, v));
    const hi = x <= 0.5 ? 1 : 2, lo = hi - 1;
    const t = (x - STOPS[lo][0]) / (STOPS[hi][0] - STOPS[lo][0]);
    const c = STOPS[lo][1].map((a, n) => Math.round(a + t * (STOPS[hi][1][n] - a)));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }
  const fmt = (v, digits = 3) => (v === null || v === undefined || Number.isNaN(v)) ? "-" : Number(v).toFixed(digits);
  const shorten = (s, n) => (s.length > n ? s.slice(0, n - 1) + "…" : s);

  // ------------------------------------------------------------------ header
  const $ = (id) => document.getElementById(id);
  $("question").textContent = meta.question || "(no question)";
  function fact(label, value, cls) {
    const span = document.createElement("span");
    const b = document.createElement("b");
    b.textContent = value;
    if (cls) b.className = cls;
    span.append(label + " ", b, "   ");
    return span;
  }
  const facts = $("facts");
  facts.append(fact("answer", meta.answer === null || meta.answer === undefined ? "(none)" : String(meta.answer)));
  if (meta.gold !== undefined) {
    facts.append(fact("gold", String(meta.gold)));
    if (meta.correct !== undefined) facts.append(fact("", meta.correct ? "correct" : "wrong", meta.correct ? "correct" : "wrong"));
  }
  if (meta.strategy) facts.append(fact("strategy", meta.strategy + (meta.budget !== undefined ? ` (n=${meta.budget}, seed ${meta.seed})` : "")));
  if (meta.score !== undefined) facts.append(fact("score", fmt(meta.score)));
  if (meta.qid !== undefined) facts.append(fact("problem", String(meta.qid)));
  let terminals = 0, pruned = 0;
  for (let i = 0; i < N; i++) { if (col.terminal[i]) terminals++; if (col.pruned[i]) pruned++; }
  facts.append(fact("nodes", String(N)), fact("terminal", String(terminals)), fact("pruned", String(pruned)));
  if (meta.error) facts.append(fact("error", meta.error, "error"));
  const L = meta.ledger;
  if (L) {
    const ledger = $("ledger");
    const sci = (v) => (v === null || v === undefined ? "-" : Number(v).toExponential(2));
    ledger.append(
      fact("generations", String(L.generations)), fact("tokens generated", String(L.generated_tokens)),
      fact("PRM tokens", String(L.prm_tokens_computed)), fact("FLOPs", sci(L.flops)),
      fact("wall", L.wall_s === null || L.wall_s === undefined ? "-" : Number(L.wall_s).toFixed(2) + " s"));
  }

  // ------------------------------------------------------------------ the SVG
  const svg = $("canvas"), viewport = $("viewport"), edgeLayer = $("edges"), nodeLayer = $("nodes");
  const el = (name, attrs) => {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  };
  const nodeEls = new Array(N), edgeEls = new Array(N), rects = new Array(N), badges = new Array(N);
  const nodeFrag = document.createDocumentFragment(), edgeFrag = document.createDocumentFragment();
  for (let i = 0; i < N; i++) {
    const classes = ["node"];
    if (col.chosen[i]) classes.push("chosen");
    if (col.terminal[i]) classes.push("terminal");
    if (col.pruned[i]) classes.push("pruned");
    if (dim(i)) classes.push("dim");
    const g = el("g", { class: classes.join(" "), "data-id": i });
    const rect = el("rect", { class: "box", x: -BOX_W / 2, y: -BOX_H / 2, width: BOX_W, height: BOX_H, rx: 6 });
    const text = col.step_text[i] || (col.parent[i] < 0 ? "(question)" : "(empty step)");
    const step = el("text", { class: "step", x: -BOX_W / 2 + 6, y: -4 });
    step.textContent = shorten(text.replace(/\s+/g, " "), STEP_CHARS);
    const score = el("text", { class: "score", x: -BOX_W / 2 + 6, y: 12 });
    const ans = col.terminal[i] && col.answer[i] !== null ? `  → ${shorten(String(col.answer[i]), 10)}` : "";
    score.textContent = (col.parent[i] < 0 ? "root" : fmt(col.score[i])) + ans;
    g.append(rect, step, score);
    if (kids[i].length) {
      const badge = el("g", { class: "badge", transform: `translate(${BOX_W / 2 - 4},${-BOX_H / 2})`, display: "none" });
      const pill = el("rect", { x: -18, y: -8, width: 36, height: 16, rx: 8 });
      const label = el("text", { class: "badge-text", x: 0, y: 4, "text-anchor": "middle" });
      label.textContent = "+" + below[i];
      badge.append(pill, label);
      g.append(badge);
      badges[i] = badge;
    }
    nodeEls[i] = g; rects[i] = rect;
    nodeFrag.append(g);
    if (col.parent[i] >= 0 && col.parent[i] < N) {
      const cls = ["edge"];
      if (col.chosen[i] && col.chosen[col.parent[i]]) cls.push("chosen");
      if (dim(i)) cls.push("dim");
      const path = el("path", { class: cls.join(" "), "data-child": i });
      edgeEls[i] = path;
      edgeFrag.append(path);
    }
  }
  edgeLayer.append(edgeFrag);
  nodeLayer.append(nodeFrag);

  let colourBy = "score";
  function recolour() {
    const values = col[colourBy] || col.score;
    for (let i = 0; i < N; i++) rects[i].setAttribute("fill", colour(values[i]));
  }

  // ------------------------------------------------------------------ folding and layout
  const folded = new Uint8Array(N);
  let rowH = ROW_H;  // grows so that a wide, shallow tree fills the height (see fit)
  const X = new Float64Array(N), Y = new Float64Array(N);
  const shown = new Uint8Array(N);
  function layout() {
    shown.fill(0);
    const pre = [];
    let next = 0;
    const stack = roots.slice().reverse();
    while (stack.length) {
      const i = stack.pop();
      shown[i] = 1;
      pre.push(i);
      if (folded[i] || !kids[i].length) { X[i] = next++; continue; }
      for (let k = kids[i].length - 1; k >= 0; k--) stack.push(kids[i][k]);
    }
    for (let j = pre.length - 1; j >= 0; j--) {
      const i = pre[j];
      if (!folded[i] && kids[i].length) X[i] = (X[kids[i][0]] + X[kids[i][kids[i].length - 1]]) / 2;
      Y[i] = col.depth[i] * rowH;
    }
  }
  function render() {
    layout();
    for (let i = 0; i < N; i++) {
      const g = nodeEls[i];
      if (!shown[i]) { g.style.display = "none"; if (edgeEls[i]) edgeEls[i].style.display = "none"; continue; }
      const x = X[i] * COL_W, y = Y[i];
      g.style.display = "";
      g.setAttribute("transform", `translate(${x},${y})`);
      g.classList.toggle("folded", Boolean(folded[i]));
      if (badges[i]) badges[i].setAttribute("display", folded[i] ? "inline" : "none");
      const e = edgeEls[i];
      if (e) {
        const p = col.parent[i], px = X[p] * COL_W, py = Y[p] + BOX_H / 2, top = y - BOX_H / 2;
        const mid = (py + top) / 2;
        e.style.display = "";
        e.setAttribute("d", `M${px},${py}C${px},${mid} ${x},${mid} ${x},${top}`);
      }
    }
  }

  // ------------------------------------------------------------------ pan and zoom
  let tx = 20, ty = 20, k = 1;
  const apply = () => viewport.setAttribute("transform", `translate(${tx},${ty}) scale(${k})`);
  function bounds() {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (let i = 0; i < N; i++) {
      if (!shown[i]) continue;
      x0 = Math.min(x0, X[i] * COL_W); x1 = Math.max(x1, X[i] * COL_W);
      y0 = Math.min(y0, Y[i]); y1 = Math.max(y1, Y[i]);
    }
    return [x0, x1, y0, y1];
  }
  function fit() {
    const w = svg.clientWidth || 800, h = svg.clientHeight || 500;
    let [x0, x1, y0, y1] = bounds();
    const depth = Math.max(1, Math.round((y1 - y0) / rowH));
    const kw = w / (x1 - x0 + BOX_W + 40);
    const want = Math.min(4 * ROW_H, Math.max(ROW_H, (h / Math.min(kw, 1.5) - BOX_H - 40) / depth));
    if (Math.abs(want - rowH) > 1) { rowH = want; render(); [x0, x1, y0, y1] = bounds(); }
    const bw = x1 - x0 + BOX_W + 40, bh = y1 - y0 + BOX_H + 40;
    k = Math.min(w / bw, h / bh, 1.5);
    tx = (w - (x1 + x0) * k) / 2;
    ty = (h - (y1 + y0) * k) / 2;
    apply();
  }
  // First view: the whole tree when it is legible so; else a legible zoom on the chosen path.
  function firstView() {
    fit();
    if (k >= READABLE) return;
    rowH = ROW_H * 1.25;
    render();
    const w = svg.clientWidth || 800;
    const end = meta.chosen >= 0 && meta.chosen < N ? meta.chosen : roots[0];
    const top = roots.includes(end) ? end : roots[0];
    k = READABLE;
    const both = Math.abs(X[top] - X[end]) * COL_W * k < w - BOX_W * k - 40;
    tx = w / 2 - (both ? (X[top] + X[end]) / 2 : X[end]) * COL_W * k;
    ty = 20 + (BOX_H / 2) * k;
    apply();
  }
  svg.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = svg.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
    const f = Math.exp(-ev.deltaY * 0.0015), nk = Math.min(8, Math.max(0.01, k * f));
    tx = mx - (mx - tx) * (nk / k); ty = my - (my - ty) * (nk / k); k = nk;
    apply();
  }, { passive: false });
  let drag = null, moved = false;
  svg.addEventListener("mousedown", (ev) => {
    if (ev.button !== 0) return;
    drag = { x: ev.clientX, y: ev.clientY, tx, ty }; moved = false;
  });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    moved = true;
    svg.classList.add("dragging");
    tx = drag.tx + dx; ty = drag.ty + dy;
    apply();
  });
  window.addEventListener("mouseup", () => { drag = null; svg.classList.remove("dragging"); });

  // ------------------------------------------------------------------ fold on click
  nodeLayer.addEventListener("click", (ev) => {
    if (moved) { moved = false; return; }  // the end of a pan, not a click
    const g = ev.target.closest("g.node");
    if (!g) return;
    const i = Number(g.dataset.id);
    if (!kids[i].length) return;
    folded[i] = folded[i] ? 0 : 1;
    render();
  });
  $("unfold-all").addEventListener("click", () => { folded.fill(0); render(); fit(); });
  $("fold-off-path").addEventListener("click", () => {
    for (let i = 0; i < N; i++) folded[i] = kids[i].length && !col.chosen[i] ? 1 : 0;
    render(); fit();
  });
  $("fit").addEventListener("click", fit);
  $("colour-by").addEventListener("change", (ev) => { colourBy = ev.target.value; recolour(); });

  // ------------------------------------------------------------------ hover
  const tip = $("tooltip"), stage = $("stage");
  function describe(i) {
    const rows = [
      ["node", `${i} (depth ${col.depth[i]}, parent ${col.parent[i]})`],
      ["step score", fmt(col.score[i], 4)],
      ["path min / mean / prod", `${fmt(col.path_min[i])} / ${fmt(col.path_mean[i])} / ${fmt(col.path_prod[i])}`],
      ["logprob", fmt(col.logprob[i], 2) + `  (${col.token_count[i]} tokens)`],
      ["finish", (col.finish[i] || "-") + (col.terminal[i] ? ", terminal" : "") + (col.truncated[i] ? ", truncated" : "")],
      ["answer", col.answer[i] === null || col.answer[i] === undefined ? "-" : String(col.answer[i])],
      ["chosen path", col.chosen[i] ? "yes" : "no"],
      ["pruned", col.pruned[i] ? "yes (not expanded further)" : "no"],
      ["children", `${kids[i].length} (${below[i]} below)`],
    ];
    if (col.visits[i]) rows.push(["MCTS visits / value", `${col.visits[i]} / ${fmt(col.value[i])}`]);
    const step = document.createElement("div");
    step.className = "step";
    step.textContent = col.step_text[i] || (col.parent[i] < 0 ? meta.question || "" : "(empty step)");
    const table = document.createElement("table");
    for (const [name, value] of rows) {
      const tr = table.insertRow();
      tr.insertCell().textContent = name;
      tr.insertCell().textContent = value;
    }
    tip.replaceChildren(step, table);
  }
  nodeLayer.addEventListener("mouseover", (ev) => {
    const g = ev.target.closest("g.node");
    if (!g) return;
    describe(Number(g.dataset.id));
    tip.hidden = false;
    place(ev);
  });
  nodeLayer.addEventListener("mousemove", (ev) => { if (!tip.hidden) place(ev); });
  nodeLayer.addEventListener("mouseout", (ev) => {
    const to = ev.relatedTarget && ev.relatedTarget.closest ? ev.relatedTarget.closest("g.node") : null;
    if (!to) tip.hidden = true;
  });
  function place(ev) {
    const r = stage.getBoundingClientRect();
    let x = ev.clientX - r.left + 14, y = ev.clientY - r.top + 14;
    if (x + tip.offsetWidth > r.width) x = Math.max(0, ev.clientX - r.left - tip.offsetWidth - 14);
    if (y + tip.offsetHeight > r.height) y = Math.max(0, ev.clientY - r.top - tip.offsetHeight - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }

  recolour();
  render();
  firstView();
  document.body.dataset.ready = "1";  // for tests and scripts: drawn
})();
