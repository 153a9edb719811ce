// The page of `emb serve`: neighbours, analogies and a zoomable 2-D map of the table, all
// through the server's JSON API (docs/serve.md). No libraries.
"use strict";

const $ = (id) => document.getElementById(id);

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const resp = await fetch(path, init);
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = data && data.error ? data.error.message : resp.status + " " + resp.statusText;
    throw new Error(msg);
  }
  return data;
}

// A query as the API takes it: a row id when the table has no words or the text is a
// number that is not a word, else the word.
function term(text) {
  const t = text.trim();
  if (/^[0-9]+$/.test(t) && (!state.info || !state.info.words)) return parseInt(t, 10);
  return t;
}

function label(r) {
  return r.word !== undefined ? r.word : "#" + r.id;
}

function setStatus(el, text, error) {
  el.textContent = text;
  el.classList.toggle("error", !!error);
}

const state = {
  info: null,
  query: null,      // the searched word/id
  queryId: null,    // its row
  neighbours: new Set(),
  map: null,        // {points, method, ...}
};

// ---- neighbours and analogies ------------------------------------------------------

function showResults(list, results) {
  list.textContent = "";
  for (const r of results) {
    const li = document.createElement("li");
    li.dataset.word = label(r);
    li.dataset.id = r.id;
    const w = document.createElement("span");
    w.className = "word";
    w.textContent = label(r);
    if (r.word !== undefined) {
      const id = document.createElement("span");
      id.className = "id";
      id.textContent = "#" + r.id;
      w.appendChild(id);
    }
    const bar = document.createElement("span");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.width = Math.max(0, Math.min(1, r.similarity)) * 100 + "%";
    bar.appendChild(fill);
    const s = document.createElement("span");
    s.className = "score";
    s.textContent = r.similarity.toFixed(3);
    li.append(w, bar, s);
    li.addEventListener("click", () => {
      $("query").value = r.word !== undefined ? r.word : String(r.id);
      search();
    });
    list.appendChild(li);
  }
}

async function search() {
  const text = $("query").value;
  if (!text.trim()) return;
  const q = term(text);
  const topn = Math.max(1, Math.min(100, parseInt($("topn").value, 10) || 15));
  setStatus($("search-status"), "searching\u2026");
  try {
    const data = await api("/v1/most_similar", { positive: [q], topn });
    state.query = q;
    state.neighbours = new Set(data.results.map((r) => r.id));
    const self = await api("/v1/lookup", typeof q === "number" ? { ids: [q] } : { words: [q] });
    state.queryId = self.data[0].id;
    showResults($("neighbours"), data.results);
    const name = self.data[0].word !== undefined ? self.data[0].word : "#" + self.data[0].id;
    setStatus($("search-status"), data.results.length + " nearest to \u201c" + name + "\u201d by cosine similarity");
    if ($("map-source").value === "query") drawMap();
    else map.render();
  } catch (e) {
    setStatus($("search-status"), e.message, true);
    $("neighbours").textContent = "";
  }
}

async function analogy() {
  const a = $("analogy-a").value, b = $("analogy-b").value, c = $("analogy-c").value;
  if (!a.trim() || !b.trim() || !c.trim()) {
    setStatus($("analogy-status"), "fill in the three words", true);
    return;
  }
  setStatus($("analogy-status"), "solving\u2026");
  try {
    const data = await api("/v1/analogy", { a: term(a), b: term(b), c: term(c), topn: 10 });
    showResults($("analogy-results"), data.results);
    setStatus($("analogy-status"), "b \u2212 a + c, nearest first");
  } catch (e) {
    setStatus($("analogy-status"), e.message, true);
    $("analogy-results").textContent = "";
  }
}

// ---- the map ---------------------------------------------------------------------------

const map = {
  canvas: null,
  ctx: null,
  // view: screen = base(point) * k + (tx, ty); base fits the points in the canvas
  k: 1, tx: 0, ty: 0,
  base: null,
  screen: [],       // screen positions of the points, for hovering
  labels: 0,

  init() {
    this.canvas = $("map");
    this.ctx = this.canvas.getContext("2d");
    new ResizeObserver(() => this.resize()).observe(this.canvas);
    this.resize();
    let drag = null;
    this.canvas.addEventListener("pointerdown", (e) => {
      drag = { x: e.clientX, y: e.clientY, tx: this.tx, ty: this.ty, moved: false };
      this.canvas.setPointerCapture(e.pointerId);
      this.canvas.classList.add("dragging");
    });
    this.canvas.addEventListener("pointermove", (e) => {
      if (drag) {
        const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
        if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
        this.tx = drag.tx + dx;
        this.ty = drag.ty + dy;
        this.render();
      } else {
        this.hover(e);
      }
    });
    this.canvas.addEventListener("pointerup", (e) => {
      this.canvas.classList.remove("dragging");
      if (drag && !drag.moved) this.click(e);
      drag = null;
    });
    this.canvas.addEventListener("pointerleave", () => { $("tooltip").hidden = true; });
    this.canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = this.canvas.getBoundingClientRect();
      this.zoom(Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    $("zoom-in").addEventListener("click", () => this.zoom(1.5));
    $("zoom-out").addEventListener("click", () => this.zoom(1 / 1.5));
    $("zoom-reset").addEventListener("click", () => { this.fit(); this.render(); });
  },

  resize() {
    const dpr = window.devicePixelRatio || 1;
    const w = this.canvas.clientWidth, h = this.canvas.clientHeight;
    this.canvas.width = Math.max(1, Math.round(w * dpr));
    this.canvas.height = Math.max(1, Math.round(h * dpr));
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    if (state.map) this.fitBase();
    this.render();
  },

  // base: the points' bounding box scaled into the canvas with a margin, y up
  fitBase() {
    const pts = state.map.points;
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const p of pts) {
      x0 = Math.min(x0, p.x); x1 = Math.max(x1, p.x);
      y0 = Math.min(y0, p.y); y1 = Math.max(y1, p.y);
    }
    const w = this.canvas.clientWidth, h = this.canvas.clientHeight, m = 40;
    const s = Math.min((w - 2 * m) / Math.max(x1 - x0, 1e-12), (h - 2 * m) / Math.max(y1 - y0, 1e-12));
    this.base = {
      s,
      cx: (x0 + x1) / 2, cy: (y0 + y1) / 2,
      w, h,
    };
  },

  fit() { this.k = 1; this.tx = 0; this.ty = 0; },

  zoom(f, px, py) {
    const w = this.canvas.clientWidth, h = this.canvas.clientHeight;
    if (px === undefined) { px = w / 2; py = h / 2; }
    const k = Math.max(0.2, Math.min(200, this.k * f));
    f = k / this.k;
    this.tx = px - (px - this.tx) * f;
    this.ty = py - (py - this.ty) * f;
    this.k = k;
    this.render();
  },

  toScreen(p) {
    const b = this.base;
    const bx = b.w / 2 + (p.x - b.cx) * b.s, by = b.h / 2 - (p.y - b.cy) * b.s;
    return [bx * this.k + this.tx, by * this.k + this.ty];
  },

  render() {
    const ctx = this.ctx, w = this.canvas.clientWidth, h = this.canvas.clientHeight;
    ctx.clearRect(0, 0, w, h);
    this.screen = [];
    this.labels = 0;
    if (!state.map || !this.base) {
      this.canvas.dataset.points = "0";
      this.canvas.dataset.labels = "0";
      return;
    }
    const pts = state.map.points;
    const kind = (p) => (p.id === state.queryId ? 2 : state.neighbours.has(p.id) ? 1 : 0);
    // draw order: plain points, then neighbours, then the query on top
    const order = pts.map((p, i) => i).sort((a, b) => kind(pts[a]) - kind(pts[b]) || b - a);
    for (const i of order) {
      const p = pts[i];
      const [x, y] = this.toScreen(p);
      this.screen[i] = [x, y];
      if (x < -20 || y < -20 || x > w + 20 || y > h + 20) continue;
      const kd = kind(p);
      ctx.beginPath();
      ctx.arc(x, y, kd === 2 ? 6 : kd === 1 ? 4.5 : 3, 0, 2 * Math.PI);
      ctx.fillStyle = kd === 2 ? "#e4572e" : kd === 1 ? "#f29e4c" : "rgba(47, 111, 219, 0.55)";
      ctx.fill();
    }
    // labels: the query, its neighbours, then by row (most frequent first), each placed
    // only where it overlaps no label already placed
    const placed = new Map();
    const cell = 40;
    const fits = (x0, y0, x1, y1) => {
      for (let gx = Math.floor(x0 / cell); gx <= Math.floor(x1 / cell); gx++)
        for (let gy = Math.floor(y0 / cell); gy <= Math.floor(y1 / cell); gy++) {
          const boxes = placed.get(gx + "," + gy);
          if (!boxes) continue;
          for (const b of boxes)
            if (x0 < b[2] && x1 > b[0] && y0 < b[3] && y1 > b[1]) return false;
        }
      return true;
    };
    const keep = (box) => {
      for (let gx = Math.floor(box[0] / cell); gx <= Math.floor(box[2] / cell); gx++)
        for (let gy = Math.floor(box[1] / cell); gy <= Math.floor(box[3] / cell); gy++) {
          const key = gx + "," + gy;
          if (!placed.has(key)) placed.set(key, []);
          placed.get(key).push(box);
        }
    };
    const byPriority = pts.map((p, i) => i).sort((a, b) => kind(pts[b]) - kind(pts[a]) || a - b);
    ctx.textBaseline = "middle";
    for (const i of byPriority) {
      const p = pts[i], s = this.screen[i];
      if (!s) continue;
      const [x, y] = s;
      if (x < 0 || y < 0 || x > w || y > h) continue;
      const kd = kind(p);
      ctx.font = kd === 2 ? "bold 14px system-ui, sans-serif" : kd === 1 ? "600 12px system-ui, sans-serif" : "12px system-ui, sans-serif";
      const text = label(p);
      const tw = ctx.measureText(text).width;
      const box = [x + 6, y - 8, x + 8 + tw, y + 8];
      if (!fits(box[0], box[1], box[2], box[3])) continue;
      keep(box);
      ctx.lineWidth = 3;
      ctx.strokeStyle = "rgba(251, 252, 253, 0.9)";
      ctx.strokeText(text, x + 7, y);
      ctx.fillStyle = kd === 2 ? "#b23a17" : kd === 1 ? "#8a4b0f" : "#2b3445";
      ctx.fillText(text, x + 7, y);
      this.labels++;
    }
    this.canvas.dataset.points = String(pts.length);
    this.canvas.dataset.labels = String(this.labels);
  },

  nearest(e) {
    const r = this.canvas.getBoundingClientRect();
    const mx = e.clientX - r.left, my = e.clientY - r.top;
    let best = -1, bd = 64;
    this.screen.forEach((s, i) => {
      if (!s) return;
      const d = (s[0] - mx) ** 2 + (s[1] - my) ** 2;
      if (d < bd) { bd = d; best = i; }
    });
    return [best, mx, my];
  },

  hover(e) {
    const tip = $("tooltip");
    const [i, mx, my] = this.nearest(e);
    if (i < 0) { tip.hidden = true; return; }
    const p = state.map.points[i];
    tip.textContent = label(p) + (p.word !== undefined ? "  #" + p.id : "") +
      (p.similarity !== undefined ? "  " + p.similarity.toFixed(3) : "");
    tip.style.left = mx + 12 + "px";
    tip.style.top = my + 12 + "px";
    tip.hidden = false;
  },

  click(e) {
    const [i] = this.nearest(e);
    if (i < 0) return;
    const p = state.map.points[i];
    $("query").value = p.word !== undefined ? p.word : String(p.id);
    search();
  },
};

async function drawMap() {
  const source = $("map-source").value, method = $("map-method").value;
  const n = Math.max(3, Math.min(state.info ? state.info.limits.max_map : 3000,
    parseInt($("map-n").value, 10) || 500));
  const req = { method, n };
  if (source === "query") {
    if (state.query === null) {
      setStatus($("map-status"), "search for a word first: the map shows its neighbourhood", true);
      return;
    }
    req.query = state.query;
  }
  setStatus($("map-status"), "computing the " + (method === "tsne" ? "t-SNE" : "PCA") + " map of " + n + " points\u2026");
  try {
    const data = await api("/v1/map", req);
    state.map = data;
    map.fit();
    map.fitBase();
    map.render();
    let text = data.n + " points \u00b7 " + (method === "tsne" ? "t-SNE (perplexity " + data.perplexity.toFixed(1) + ", KL " + data.kl_divergence.toFixed(3) + ")" : "PCA");
    if (data.query !== undefined) {
      const q = data.points[0];
      text += " \u00b7 the neighbourhood of \u201c" + label(q) + "\u201d";
    } else {
      text += " \u00b7 rows 0\u2013" + (data.n - 1);
    }
    text += " \u00b7 drag to pan, scroll to zoom, click a point to search it";
    setStatus($("map-status"), text);
  } catch (e) {
    setStatus($("map-status"), e.message, true);
  }
}

async function start() {
  map.init();
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); search(); });
  $("analogy-form").addEventListener("submit", (e) => { e.preventDefault(); analogy(); });
  $("map-form").addEventListener("submit", (e) => { e.preventDefault(); drawMap(); });
  $("map-source").addEventListener("change", () => {
    $("map-n").value = $("map-source").value === "query" ? 100 : 500;
  });
  try {
    const info = await api("/v1/info");
    state.info = info;
    $("info").textContent = info.model + " \u00b7 " + info.rows.toLocaleString("en") + " rows \u00d7 " +
      info.dim + " \u00b7 " + info.storage + (info.mapped ? " (memory-mapped)" : "") + " \u00b7 " +
      (info.words ? "words" : "row ids only");
    $("map-n").max = info.limits.max_map;
    if (!info.words) $("query").placeholder = "a row id";
    $("map-n").value = Math.min(500, info.rows);
    drawMap();
  } catch (e) {
    $("info").textContent = "cannot reach the server: " + e.message;
  }
}

document.addEventListener("DOMContentLoaded", start);
