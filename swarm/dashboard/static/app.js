// swarm dashboard: polls /api/v1/state and redraws. Every string that came from a peer is put
// in the page with textContent or an SVG text node, never parsed as HTML.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const PAGE = 20;
const pageOffset = new Map(); // stage -> offset of the page being shown
let lastState = null;

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

function fmt(x, digits) {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  const d = digits === undefined ? 2 : digits;
  return Math.abs(x) >= 1000 ? Math.round(x).toLocaleString("en") : Number(x).toFixed(d);
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.floor(s));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
}

function shortLabel(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

const EMPTY_TITLES = {
  starting: "Connecting to the swarm…",
  unreachable: "DHT unreachable",
  no_run: "No such run on the DHT",
  no_peers: "No peers in this run yet",
};

function renderHeader(st) {
  const run = st.run;
  const line = document.getElementById("run-line");
  clear(line);
  line.appendChild(el("span", { class: "run-id", id: "run-id" }, "run " + st.run_id));
  if (run) {
    line.appendChild(el("span", {}, " · " + run.model + " · " + run.num_stages + " stages · " +
      run.layers + " layers · microbatch " + run.microbatch_size + "×" + run.seq_len));
  }
  const health = document.getElementById("health");
  health.textContent = st.health.line || st.message;
  health.dataset.ok = st.status === "ok" ? String(st.health.ok) : "false";
  const age = st.read_at ? Math.max(0, st.now - st.read_at) : null;
  document.getElementById("updated").textContent =
    age === null ? "" : "read from the DHT " + duration(age) + " ago";
}

function renderEmpty(st) {
  const empty = document.getElementById("empty-state");
  const isEmpty = st.status !== "ok" && !st.stale;
  empty.hidden = !isEmpty;
  empty.dataset.status = st.status;
  document.getElementById("empty-title").textContent = EMPTY_TITLES[st.status] || st.status;
  document.getElementById("empty-message").textContent = st.message;
  const stale = document.getElementById("stale");
  stale.hidden = !st.stale;
  stale.textContent = st.stale ? st.message + " — showing the last data read" : "";
  document.getElementById("content").hidden = isEmpty;
  return isEmpty;
}

function card(label, value, id) {
  const c = el("div", { class: "card" });
  c.appendChild(el("div", { class: "label" }, label));
  c.appendChild(el("div", { class: "value", id: id }, value));
  return c;
}

function renderSummary(st) {
  const p = st.progress || {};
  const box = clear(document.getElementById("summary"));
  box.appendChild(card("iteration", p.iteration === undefined ? "–" : p.iteration, "iteration"));
  box.appendChild(card("loss", fmt(p.loss, 4), "loss"));
  box.appendChild(card("tokens/s", fmt(p.tokens_per_s, 1), "tokens"));
  box.appendChild(card("s / iteration", fmt(p.seconds_per_iteration, 2), "seconds"));
  box.appendChild(card("peers + holders", st.health.peers + " + " + st.health.holders, "peers"));
  box.appendChild(card("stages served", st.health.stages_served + " / " + st.health.num_stages, "served"));
  box.appendChild(card("rerouted", fmt(p.rerouted, 0), "rerouted"));
  box.appendChild(card("re-executed", fmt(p.reexecuted, 0), "reexecuted"));
  box.appendChild(card("gradients lost", fmt(p.gradients_lost, 0), "lost"));
}

function renderLoss(curve) {
  const chart = clear(document.getElementById("loss-chart"));
  const W = 640, H = 240, L = 48, R = 12, T = 12, B = 28;
  if (!curve.length) {
    chart.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "muted" },
      "no finished iteration yet"));
    return;
  }
  const xs = curve.map((p) => p[0]), ys = curve.map((p) => p[1]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x1 === x0) x1 = x0 + 1;
  if (y1 - y0 < 1e-9) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.05;
  y0 -= pad; y1 += pad;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    chart.appendChild(svg("line", { x1: L, x2: W - R, y1: sy(y), y2: sy(y), class: "gridline" }));
    chart.appendChild(svg("text", { x: L - 6, y: sy(y) + 4, "text-anchor": "end", class: "tick" }, y.toFixed(2)));
  }
  for (let i = 0; i <= 4; i++) {
    const x = x0 + ((x1 - x0) * i) / 4;
    chart.appendChild(svg("text", { x: sx(x), y: H - 8, "text-anchor": "middle", class: "tick" }, Math.round(x)));
  }
  const points = curve.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
  chart.appendChild(svg("polyline", { points: points, class: "loss-line", id: "loss-line" }));
  const last = curve[curve.length - 1];
  chart.appendChild(svg("circle", { cx: sx(last[0]), cy: sy(last[1]), r: 3.5, class: "loss-dot" }));
}

function renderFlow(st) {
  const graph = clear(document.getElementById("flow-graph"));
  const nodes = st.flow.nodes, edges = st.flow.edges, n = st.run ? st.run.num_stages : 0;
  const columns = new Map();
  for (const node of nodes) {
    if (!columns.has(node.column)) columns.set(node.column, []);
    columns.get(node.column).push(node);
  }
  const nodeW = 128, nodeH = 30, gapY = 14, top = 40, left = 16;
  const avail = graph.parentNode.clientWidth || 900;
  const colW = Math.max(150, Math.min(260, (avail - 2 * left - nodeW) / (n + 1)));
  const rows = Math.max(1, ...[...columns.values()].map((c) => c.length));
  const W = left * 2 + (n + 2) * colW - (colW - nodeW), H = top + rows * (nodeH + gapY) + 10;
  graph.setAttribute("viewBox", "0 0 " + W + " " + H);
  graph.setAttribute("width", W);
  graph.setAttribute("height", H);
  const colX = (c) => left + (c + 1) * colW;
  for (let c = -1; c <= n; c++) {
    const stage = st.stages[c];
    const name = c === -1 ? "holders (data)" : c === n ? "holders (loss)" : "stage " + c;
    if (stage && stage.bottleneck) {
      graph.appendChild(svg("rect", { x: colX(c) - 8, y: 4, width: nodeW + 16, height: H - 8, rx: 8,
        class: "bottleneck-col" }));
    }
    const label = stage && stage.bottleneck ? name + " · bottleneck" : name;
    graph.appendChild(svg("text", { x: colX(c) + nodeW / 2, y: 24, "text-anchor": "middle", class: "col-title" }, label));
  }
  const pos = new Map();
  for (const [c, list] of columns) {
    const offset = ((rows - list.length) * (nodeH + gapY)) / 2;
    list.forEach((node, i) => pos.set(node.id, { x: colX(c), y: top + offset + i * (nodeH + gapY) }));
  }
  const maxRate = st.flow.max_rate || 1;
  const edgeGroup = svg("g", { class: "edges" });
  for (const e of edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + nodeW, y1 = a.y + nodeH / 2, x2 = b.x, y2 = b.y + nodeH / 2, mx = (x1 + x2) / 2;
    const path = svg("path", { d: "M" + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," + y2,
      class: "edge", "stroke-width": (1.5 + (12 * e.rate) / maxRate).toFixed(2) });
    path.appendChild(svg("title", {}, fmt(e.rate, 2) + " microbatches/s"));
    edgeGroup.appendChild(path);
    edgeGroup.appendChild(svg("text", { x: mx, y: (y1 + y2) / 2 - 4, "text-anchor": "middle", class: "edge-rate" },
      fmt(e.rate, 1)));
  }
  graph.appendChild(edgeGroup);
  for (const node of nodes) {
    const p = pos.get(node.id);
    const g = svg("g", { class: "node" + (node.count > 1 ? " group" : "") });
    g.appendChild(svg("rect", { x: p.x, y: p.y, width: nodeW, height: nodeH, rx: 6 }));
    g.appendChild(svg("text", { x: p.x + 8, y: p.y + 19, class: "node-label" }, shortLabel(node.label, 15)));
    g.appendChild(svg("text", { x: p.x + nodeW - 6, y: p.y + 19, "text-anchor": "end", class: "node-rate" },
      fmt(node.throughput, 0)));
    g.appendChild(svg("title", {}, node.label + " · throughput " + fmt(node.throughput, 2) + " mb/s"));
    graph.appendChild(g);
  }
  if (!edges.length) {
    graph.appendChild(svg("text", { x: W / 2, y: H - 4, "text-anchor": "middle", class: "muted" },
      "no routes published yet"));
  }
}

const PEER_COLUMNS = [
  ["name", (p) => p.name || "—"], ["peer", (p) => p.short], ["state", (p) => p.state],
  ["throughput", (p) => fmt(p.throughput, 1)], ["capacity", (p) => fmt(p.capacity, 1)],
  ["spare", (p) => fmt(p.spare, 1)], ["region", (p) => p.region || "—"], ["role", (p) => p.role],
  ["version", (p) => p.version], ["online", (p) => duration(p.online_s)], ["iter", (p) => p.iteration],
];

function peerTable(peers) {
  const table = el("table", { class: "peers" });
  const head = el("tr");
  for (const [name] of PEER_COLUMNS) head.appendChild(el("th", {}, name));
  table.appendChild(el("thead")).appendChild(head);
  const body = table.appendChild(el("tbody"));
  for (const p of peers) {
    const tr = el("tr", { class: "peer-row", "data-state": p.state });
    tr.title = p.id;
    for (const [, get] of PEER_COLUMNS) tr.appendChild(el("td", {}, get(p)));
    body.appendChild(tr);
  }
  return table;
}

async function showPage(stage, offset, box) {
  pageOffset.set(stage, offset);
  const r = await fetch("/api/v1/stages/" + stage + "/peers?offset=" + offset + "&limit=" + PAGE);
  const page = await r.json();
  renderStageBody(box, stage, page.peers, page.total, page.offset);
}

function renderStageBody(box, stage, peers, total, offset) {
  clear(box);
  if (!total) {
    box.appendChild(el("p", { class: "empty-stage" }, "no peer serves this stage"));
    return;
  }
  box.appendChild(peerTable(peers));
  if (total > PAGE) {
    const pager = el("div", { class: "pager" });
    const prev = el("button", { type: "button" }, "‹ prev");
    const next = el("button", { type: "button" }, "next ›");
    prev.disabled = offset <= 0;
    next.disabled = offset + PAGE >= total;
    prev.addEventListener("click", () => showPage(stage, Math.max(0, offset - PAGE), box));
    next.addEventListener("click", () => showPage(stage, offset + PAGE, box));
    pager.appendChild(prev);
    pager.appendChild(el("span", {}, (offset + 1) + "–" + Math.min(total, offset + PAGE) + " of " + total));
    pager.appendChild(next);
    box.appendChild(pager);
  }
}

function renderStages(st) {
  const box = clear(document.getElementById("stages"));
  for (const s of st.stages) {
    const sec = el("div", { class: "stage" + (s.bottleneck ? " bottleneck" : ""), "data-stage": s.stage });
    const h = el("h3");
    h.appendChild(el("span", {}, "stage " + s.stage));
    const last = s.blocks[1] - 1;
    h.appendChild(el("span", { class: "muted" }, s.blocks[0] === last ? "block " + last : "blocks " + s.blocks[0] + "–" + last));
    if (s.bottleneck) h.appendChild(el("span", { class: "badge" }, "bottleneck"));
    if (!s.serving) h.appendChild(el("span", { class: "badge bad" }, "unserved"));
    sec.appendChild(h);
    sec.appendChild(el("div", { class: "muted small" }, s.peers_total + " peer(s) · throughput " +
      fmt(s.throughput, 1) + " · capacity " + fmt(s.capacity, 1) + " · assigned flow " + fmt(s.assigned, 1) +
      " microbatches/s"));
    const body = el("div", { class: "stage-body" });
    sec.appendChild(body);
    box.appendChild(sec);
    const offset = pageOffset.get(s.stage) || 0;
    if (offset > 0 && s.peers_total > offset) showPage(s.stage, offset, body);
    else renderStageBody(body, s.stage, s.peers, s.peers_total, 0);
  }
  const holders = clear(document.getElementById("holders"));
  if (st.holders.length) holders.appendChild(peerTable(st.holders));
  else holders.appendChild(el("p", { class: "empty-stage" }, "no data holder online"));
}

function renderEvents(st) {
  const chips = clear(document.getElementById("event-counts"));
  for (const kind of ["join", "leave", "crash", "reroute", "reexecute"]) {
    chips.appendChild(el("span", { class: "chip kind-" + kind }, kind + " " + (st.event_counts[kind] || 0)));
  }
  const list = clear(document.getElementById("events"));
  if (!st.events.length) list.appendChild(el("li", { class: "muted" }, "no churn recorded"));
  for (const ev of st.events.slice(0, 40)) {
    const li = el("li");
    li.appendChild(el("span", { class: "time" }, new Date(ev.at * 1000).toLocaleTimeString()));
    li.appendChild(el("span", { class: "chip kind-" + ev.kind }, ev.kind));
    li.appendChild(el("span", { class: "who" }, (ev.name || ev.short) + (ev.stage >= 0 ? " · stage " + ev.stage : " · holder")));
    if (ev.detail) li.appendChild(el("span", { class: "muted" }, " " + ev.detail));
    list.appendChild(li);
  }
}

function render(st) {
  lastState = st;
  renderHeader(st);
  if (renderEmpty(st)) return;
  renderSummary(st);
  renderLoss(st.loss_curve);
  renderEvents(st);
  renderFlow(st);
  renderStages(st);
  document.body.dataset.ready = "true";
}

async function poll() {
  try {
    const r = await fetch("/api/v1/state", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (err) {
    const health = document.getElementById("health");
    health.textContent = "dashboard server not answering (" + err.message + "); retrying";
    health.dataset.ok = "false";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
