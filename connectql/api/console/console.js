// The connectql web console: plain JavaScript over the server's own API (no library, nothing
// fetched from elsewhere). Live state comes from GET /events (Server-Sent Events, read with
// fetch so that the token can go in a header); the token is kept in sessionStorage only.
"use strict";

const TOKEN_KEY = "connectql.token";
const POINTS = 60; // samples a sparkline shows, one a second
const KEPT = 300; // samples kept: a connector's page charts its last five minutes
const SVG = "http://www.w3.org/2000/svg";

const store = {
  connectors: new Map(), // name -> {info, row}: GET /connectors?expand=info, status rows
  streams: [], // GET /streams
  history: new Map(), // name -> {rate: [], lag: []}
  following: false,
};

// ------------------------------------------------------------------ DOM helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

const $ = (selector) => document.querySelector(selector);
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

function number(v) {
  if (v === null || v === undefined || v === "") return "–";
  if (typeof v !== "number") return String(v);
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

function table(columns, rows) {
  return el(
    "table",
    { class: "grid" },
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", {}, c)))),
    el(
      "tbody",
      {},
      rows.map((r) =>
        el("tr", {}, r.map((v) => el("td", {}, v === null ? el("i", {}, "NULL") : typeof v === "object" ? JSON.stringify(v) : String(v)))),
      ),
    ),
  );
}

// ------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

async function api(method, path, body) {
  const headers = { Accept: "application/json", ...authHeaders() };
  let data;
  if (body !== undefined) {
    headers["Content-Type"] = typeof body === "string" ? "text/plain" : "application/json";
    data = typeof body === "string" ? body : JSON.stringify(body);
  }
  const resp = await fetch(path, { method, headers, body: data, cache: "no-store" });
  const text = await resp.text();
  let payload = text;
  try {
    payload = JSON.parse(text);
  } catch (_) {
    // Prometheus text and the like stay text
  }
  if (!resp.ok) {
    const message = payload && payload.message ? payload.message : text || resp.statusText;
    if (resp.status === 401) askToken();
    throw new ApiError(resp.status, message, payload);
  }
  return payload;
}

// One SELECT (or other statement) through POST /sql: its result ({columns, rows} or {message}).
async function sql(text) {
  const answer = await api("POST", "/sql", { sql: text });
  return answer.results[answer.results.length - 1] || {};
}

const literal = (s) => "'" + String(s).replaceAll("'", "''") + "'";

// ------------------------------------------------------------------ notices, confirmation, login

let noticeTimer = null;

function notify(text, kind = "info") {
  const box = $("#notice");
  $("#notice-text").textContent = text;
  box.className = kind;
  box.hidden = false;
  clearTimeout(noticeTimer);
  if (kind === "info") noticeTimer = setTimeout(() => (box.hidden = true), 5000);
}

function confirmed(text, ok) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = text;
  $("#confirm-ok").textContent = ok;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((done) => dialog.addEventListener("close", () => done(dialog.returnValue === "ok"), { once: true }));
}

function askToken(message = "") {
  const dialog = $("#login");
  $("#login-error").textContent = message;
  if (!dialog.open) dialog.showModal();
  $("#login-token").focus();
}

async function logIn(event) {
  event.preventDefault();
  const input = $("#login-token");
  sessionStorage.setItem(TOKEN_KEY, input.value);
  input.value = "";
  try {
    await api("GET", "/connectors");
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    askToken(e.status === 401 ? "The server refused this token." : e.message);
    return;
  }
  $("#login").close();
  $("#logout").hidden = false;
  start();
}

function logOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
}

// ------------------------------------------------------------------ state from the API and /events

async function loadConnectors() {
  const listed = await api("GET", "/connectors?expand=info&expand=status");
  const seen = new Set(Object.keys(listed));
  for (const [name, { info, status }] of Object.entries(listed)) {
    const known = store.connectors.get(name);
    const row = { ...(known ? known.row : {}), ...statusRow(status) };
    store.connectors.set(name, { info, row });
  }
  for (const name of [...store.connectors.keys()]) if (!seen.has(name)) forget(name);
}

function statusRow(status) {
  const { connector, tasks, type, name, ...counts } = status;
  return { ...counts, state: connector.state, last_error: connector.trace || null };
}

async function loadStreams() {
  store.streams = await api("GET", "/streams");
}

function forget(name) {
  store.connectors.delete(name);
  store.history.delete(name);
}

async function follow() {
  if (store.following) return;
  store.following = true;
  try {
    for (;;) {
      try {
        const resp = await fetch("/events?interval=1", { headers: authHeaders(), cache: "no-store" });
        if (resp.status === 401) return askToken();
        if (!resp.ok) throw new Error("GET /events answered " + resp.status);
        setLive(true);
        await readEvents(resp.body.getReader());
      } catch (_) {
        // the server went away or restarted: say so and try again
      }
      setLive(false);
      await sleep(2000);
    }
  } finally {
    store.following = false;
  }
}

async function readEvents(reader) {
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      await onEvent(event, JSON.parse(data || "null"));
    }
  }
}

async function onEvent(event, data) {
  if (event === "snapshot") {
    const names = new Set(data.map((r) => r.name));
    for (const name of [...store.connectors.keys()]) if (!names.has(name)) forget(name);
    if (data.some((r) => !store.connectors.has(r.name))) await refresh();
    for (const row of data) merge(row.name, row);
  } else if (event === "state") {
    if (data.to === "DELETED") forget(data.connector);
    else if (!store.connectors.has(data.connector)) await refresh();
    else merge(data.connector, { state: data.to, last_error: data.error });
    view.changed(data.connector);
  } else if (event === "progress") {
    merge(data.connector, data);
  }
  view.update();
}

function merge(name, fields) {
  const entry = store.connectors.get(name);
  if (entry) Object.assign(entry.row, fields);
}

async function refresh() {
  await Promise.all([loadConnectors(), loadStreams()]);
}

function setLive(on) {
  const live = $("#live");
  live.textContent = on ? "live" : "offline";
  live.classList.toggle("on", on);
}

// Every second each connector's rows/s and lag are sampled for its sparklines.
function sample() {
  for (const [name, { row }] of store.connectors) {
    const h = store.history.get(name) || { rate: [], lag: [], at: [] };
    h.rate.push(row.rows_per_sec ?? null);
    h.lag.push(row.lag ?? null);
    h.at.push(new Date().toTimeString().slice(0, 8));
    if (h.rate.length > KEPT) h.rate.shift(), h.lag.shift(), h.at.shift();
    store.history.set(name, h);
  }
  view.update();
}

// ------------------------------------------------------------------ charts (inline SVG)

function sparkline(all, cls) {
  const values = all.slice(-POINTS);
  const w = 110;
  const h = 26;
  const known = values.filter((v) => typeof v === "number");
  const top = Math.max(1, ...known);
  const step = w / (POINTS - 1);
  const offset = POINTS - values.length;
  const points = [];
  values.forEach((v, i) => {
    if (typeof v === "number") points.push(`${((offset + i) * step).toFixed(1)},${(h - 2 - (v / top) * (h - 4)).toFixed(1)}`);
  });
  return svg(
    "svg",
    { class: "spark " + cls, width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" },
    svg("title", {}, `max ${number(top)}`),
    points.length ? svg("polyline", { points: points.join(" ") }) : null,
  );
}

function lineChart(series, label) {
  const w = 520;
  const h = 160;
  const pad = { l: 48, r: 8, t: 10, b: 22 };
  const values = series.map((p) => p[1]).filter((v) => typeof v === "number");
  const top = Math.max(1, ...values);
  const x = (i) => pad.l + (series.length > 1 ? (i / (series.length - 1)) * (w - pad.l - pad.r) : 0);
  const y = (v) => pad.t + (1 - v / top) * (h - pad.t - pad.b);
  const line = series.map((p, i) => `${x(i).toFixed(1)},${y(p[1] || 0).toFixed(1)}`).join(" ");
  return svg(
    "svg",
    { class: "chart", viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": label },
    svg("line", { x1: pad.l, y1: y(0), x2: w - pad.r, y2: y(0), class: "axis" }),
    svg("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: y(0), class: "axis" }),
    svg("text", { x: pad.l - 4, y: pad.t + 8, "text-anchor": "end" }, number(top)),
    svg("text", { x: pad.l - 4, y: y(0), "text-anchor": "end" }, "0"),
    series.length ? svg("text", { x: pad.l, y: h - 4 }, series[0][0]) : null,
    series.length > 1 ? svg("text", { x: w - pad.r, y: h - 4, "text-anchor": "end" }, series[series.length - 1][0]) : null,
    series.length ? svg("polyline", { points: line, class: "series" }) : null,
  );
}

// Sources -> streams -> sinks, from the catalog's connectors and streams.
function pipelineGraph() {
  const sources = [];
  const sinks = [];
  const streams = new Set(store.streams.map((s) => s.name));
  for (const [name, { info, row }] of store.connectors) {
    const stream = info.config.stream;
    if (stream) streams.add(stream);
    (info.type === "source" ? sources : sinks).push({ name, stream, state: row.state, type: info.config["connector.class"] });
  }
  const columns = [sources, [...streams].sort().map((name) => ({ name })), sinks];
  const colX = [10, 290, 570];
  const nodeW = 200;
  const rowH = 48;
  const height = Math.max(1, ...columns.map((c) => c.length)) * rowH + 10;
  const at = new Map();
  const nodes = [];
  columns.forEach((column, c) => {
    column.forEach((n, i) => {
      const y = 8 + i * rowH;
      const kind = ["source", "stream", "sink"][c];
      at.set(kind + ":" + n.name, { x: colX[c], y });
      const href = kind === "stream" ? "#/streams/" + encodeURIComponent(n.name) : "#/connector/" + encodeURIComponent(n.name);
      nodes.push(
        svg(
          "a",
          { href, class: `node ${kind} ${n.state ? "state-" + n.state : ""}`, "data-node": kind + ":" + n.name },
          svg("rect", { x: colX[c], y, width: nodeW, height: rowH - 12, rx: 6 }),
          svg("text", { x: colX[c] + 10, y: y + 15, class: "name" }, n.name),
          svg("text", { x: colX[c] + 10, y: y + 29, class: "sub" }, kind === "stream" ? "stream" : `${n.type} · ${n.state || ""}`),
        ),
      );
    });
  });
  const edges = [];
  const edge = (from, to) => {
    const a = at.get(from);
    const b = at.get(to);
    if (!a || !b) return;
    const x1 = a.x + nodeW;
    const y1 = a.y + (rowH - 12) / 2;
    const y2 = b.y + (rowH - 12) / 2;
    edges.push(svg("path", { d: `M${x1},${y1} C${x1 + 40},${y1} ${b.x - 40},${y2} ${b.x},${y2}`, class: "edge" }));
  };
  for (const s of sources) edge("source:" + s.name, "stream:" + s.stream);
  for (const s of sinks) edge("stream:" + s.stream, "sink:" + s.name);
  return svg("svg", { class: "graph", viewBox: `0 0 780 ${height}`, role: "img", "aria-label": "pipeline graph" }, edges, nodes);
}

// ------------------------------------------------------------------ actions

const ACTIONS = {
  pause: { label: "Pause", call: (n) => api("PUT", `/connectors/${n}/pause`) },
  resume: { label: "Resume", call: (n) => api("PUT", `/connectors/${n}/resume`) },
  restart: { label: "Restart", call: (n) => api("POST", `/connectors/${n}/restart`) },
  reset: {
    label: "Reset offsets",
    confirm: (n) => `Reset the offsets of ${n}? Its next start reads everything again from the beginning.`,
    call: (n) => api("DELETE", `/connectors/${n}/offsets`),
  },
  drop: {
    label: "Drop",
    confirm: (n) => `Drop connector ${n}? Its query stops and its checkpoint is deleted.`,
    call: (n) => api("DELETE", `/connectors/${n}`),
  },
};

// the states in which each action is allowed (connectql/catalog/states.py ACTIONS; null: all;
// tests/test_console.py checks that the two agree)
const ALLOWED = {
  pause: ["CREATED", "FAILED", "RESTARTING", "RUNNING", "STALLED", "STARTING", "STOPPED"],
  resume: ["PAUSED"],
  restart: null,
  reset: ["FAILED", "FINISHED", "PAUSED"],
  drop: null,
};

function showActions(container, state) {
  if (!container) return;
  for (const b of container.querySelectorAll("button[data-action]")) {
    const allowed = ALLOWED[b.dataset.action];
    b.hidden = allowed !== null && !allowed.includes(state);
  }
}

async function act(action, name, button) {
  const spec = ACTIONS[action];
  if (spec.confirm && !(await confirmed(spec.confirm(name), spec.label))) return;
  if (button) button.disabled = true;
  try {
    const answer = await spec.call(encodeURIComponent(name));
    if (answer.connector) merge(name, { state: answer.connector.state, last_error: answer.connector.trace || null });
    if (action === "drop") {
      forget(name);
      await loadStreams();
      // only the dropped connector's own page goes: the user may have moved on meanwhile
      if (location.hash === `#/connector/${encodeURIComponent(name)}`) location.hash = "#/";
    }
    notify(answer.message || `${spec.label}: done`);
  } catch (e) {
    notify(`${spec.label} (${name}) refused: ${e.message}`, "error");
  } finally {
    if (button) button.disabled = false;
    view.changed(name);
    view.update();
  }
}

function actionButtons(name) {
  return el(
    "span",
    { class: "actions" },
    Object.entries(ACTIONS).map(([action, spec]) =>
      el("button", { type: "button", class: spec.confirm ? "danger" : "", "data-action": action, onclick: (e) => act(action, name, e.currentTarget) }, spec.label),
    ),
  );
}

function stateBadge(state) {
  return el("span", { class: "state state-" + state }, state || "?");
}

// ------------------------------------------------------------------ views

const views = {
  overview: {
    render(main) {
      main.append(
        el("section", {}, el("h2", {}, "Pipeline"), el("div", { id: "graph" })),
        el(
          "section",
          {},
          el("h2", {}, "Connectors"),
          el(
            "table",
            { id: "connectors", class: "grid" },
            el("thead", {}, el("tr", {}, ["Connector", "State", "Rows/s", "Lag", "Read", "Written", "Last error", ""].map((c) => el("th", {}, c)))),
            el("tbody"),
          ),
          el("p", { id: "no-connectors", class: "muted" }, "No connectors yet: create one below or with POST /sql."),
        ),
        el(
          "section",
          {},
          el("h2", {}, "Create a connector"),
          el("textarea", { id: "create-sql", rows: 3, spellcheck: "false", placeholder: "CREATE SOURCE CONNECTOR gen FROM datagen INTO numbers WITH ('rows.per.second' = 10)" }),
          el("div", { class: "buttons" }, el("button", { type: "button", id: "create", onclick: create }, "Create")),
          el("p", { id: "create-error", class: "error" }),
        ),
      );
    },
    update() {
      const graph = $("#graph");
      if (graph) graph.replaceChildren(pipelineGraph());
      const body = $("#connectors tbody");
      if (!body) return;
      const names = [...store.connectors.keys()].sort();
      $("#no-connectors").hidden = names.length > 0;
      for (const tr of [...body.children]) if (!store.connectors.has(tr.dataset.name)) tr.remove();
      names.forEach((name, i) => {
        let tr = body.querySelector(`tr[data-name="${CSS.escape(name)}"]`);
        if (!tr) tr = connectorRow(name);
        if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
        fillRow(tr, name);
      });
    },
    changed() {},
  },

  connector: {
    async render(main, name) {
      this.name = name;
      const entry = store.connectors.get(name);
      if (!entry) {
        main.append(el("p", { class: "error" }, `No connector named ${name}.`));
        return;
      }
      main.append(
        el("h1", {}, name, " ", el("span", { id: "detail-state" }), " ", actionButtons(name)),
        el(
          "div",
          { class: "cards" },
          el("section", {}, el("h2", {}, "Status"), el("dl", { id: "detail-status" })),
          el("section", {}, el("h2", {}, "Options"), el("div", { id: "detail-options" })),
          el("section", { class: "wide" }, el("h2", {}, "History (rows/s per batch)"), el("div", { id: "detail-history" })),
          el("section", { class: "wide" }, el("h2", {}, "Lag (records behind), last five minutes"), el("div", { id: "detail-lag" })),
          el("section", {}, el("h2", {}, "Offsets"), el("div", { id: "detail-offsets" })),
          el("section", { class: "wide" }, el("h2", {}, "Recent events"), el("div", { id: "detail-events" })),
        ),
      );
      const config = Object.entries(entry.info.config).map(([k, v]) => [k, v]);
      $("#detail-options").append(table(["option", "value"], config));
      this.update();
      await this.changed(name);
    },
    update() {
      const entry = store.connectors.get(this.name);
      const status = $("#detail-status");
      if (!entry || !status) return;
      $("#detail-state").replaceChildren(stateBadge(entry.row.state));
      showActions($("h1 .actions"), entry.row.state);
      const r = entry.row;
      const facts = [
        ["kind", entry.info.type],
        ["type", entry.info.config["connector.class"]],
        ["stream", entry.info.config.stream],
        ["desired state", r.desired_state],
        ["rows read", number(r.rows_total)],
        ["rows written", number(r.rows_written)],
        ["dead-lettered", number(r.rows_dead_lettered)],
        ["rows/s", number(r.rows_per_sec)],
        ["lag", number(r.lag)],
        ["lag_bytes", number(r.lag_bytes)],
        ["last batch", r.last_batch_at],
        ["last error", r.last_error],
      ];
      status.replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-fact": k }, v ?? "–")]));
      const h = store.history.get(this.name);
      const lag = h ? h.at.map((t, i) => [t, h.lag[i]]).filter(([, v]) => typeof v === "number") : [];
      $("#detail-lag").replaceChildren(
        lag.length > 1 ? lineChart(lag, "lag in records, sampled each second") : el("p", { class: "muted" }, "No lag measured yet."),
      );
    },
    // A state change: reload what the change writes (events, offsets, history).
    async changed(name) {
      if (name !== this.name || !$("#detail-events")) return;
      const q = literal(name);
      let events, history, offsets;
      try {
        [events, history, offsets] = await Promise.all([
          sql(`SELECT time, from_state, to_state, reason, error FROM connector_events WHERE connector = ${q} ORDER BY time DESC LIMIT 20`),
          sql(`SELECT started_at, processed_rows_per_sec FROM connector_metrics WHERE connector = ${q} ORDER BY started_at DESC LIMIT 120`),
          api("GET", `/connectors/${encodeURIComponent(name)}/offsets`),
        ]);
      } catch (e) {
        $("#detail-events")?.replaceChildren(el("p", { class: "error" }, e.message));
        return;
      }
      if (name !== this.name || !$("#detail-events")) return; // the page changed meanwhile
      $("#detail-events").replaceChildren(table(events.columns, events.rows));
      const points = history.rows.reverse().map(([t, v]) => [String(t).slice(11, 19), v]);
      $("#detail-history").replaceChildren(points.length ? lineChart(points, "rows per second per batch") : el("p", { class: "muted" }, "No batches yet."));
      const offset = offsets.offsets[0] || {};
      $("#detail-offsets").replaceChildren(
        el("h3", {}, "committed"),
        el("pre", {}, JSON.stringify(offset.offset ?? null, null, 2)),
        el("h3", {}, "latest"),
        el("pre", {}, JSON.stringify(offset.latest ?? null, null, 2)),
      );
    },
  },

  streams: {
    async render(main, name) {
      this.name = name;
      await loadStreams();
      main.append(
        el("h1", {}, "Streams"),
        el(
          "section",
          {},
          table(
            ["stream", "records", "files", "bytes", "key", "created by", "retention"],
            store.streams.map((s) => [s.name, s.records, s.files, s.bytes, s.key, s.created_by, s.retention]),
          ),
        ),
      );
      main.querySelectorAll("tbody tr").forEach((tr, i) => {
        const cell = tr.firstChild;
        const s = store.streams[i].name;
        cell.replaceChildren(el("a", { href: "#/streams/" + encodeURIComponent(s) }, s));
      });
      const stream = store.streams.find((s) => s.name === name);
      if (!stream) return;
      main.append(
        el(
          "div",
          { class: "cards" },
          el("section", {}, el("h2", {}, `${name}: schema`), table(["column", "type"], schemaColumns(stream.schema))),
          el("section", { class: "wide" }, el("h2", {}, `${name}: 20 rows`), el("div", { id: "stream-sample" }, el("p", { class: "muted" }, "reading…"))),
        ),
      );
      try {
        const rows = await sql(`SELECT * FROM ${name} LIMIT 20`);
        $("#stream-sample").replaceChildren(table(rows.columns, rows.rows));
      } catch (e) {
        $("#stream-sample").replaceChildren(el("p", { class: "error" }, e.message));
      }
    },
    update() {},
    changed() {},
  },

  sql: {
    render(main) {
      main.append(
        el("h1", {}, "SQL"),
        el("p", { class: "muted" }, "Statements as in connectql sql: SELECT over the status tables (connectors, streams, connector_events, connector_metrics, connector_offsets) and streams, SHOW, DESCRIBE, CREATE, ... Ctrl+Enter runs."),
        el("textarea", { id: "sql-text", rows: 6, spellcheck: "false", placeholder: "SELECT name, state, rows_total FROM connectors", onkeydown: (e) => e.key === "Enter" && e.ctrlKey && runSql() }),
        el("div", { class: "buttons" }, el("button", { type: "button", id: "sql-run", onclick: runSql }, "Run")),
        el("div", { id: "sql-results" }),
      );
    },
    update() {},
    changed() {},
  },
};

// Spark DDL ("id BIGINT, tags ARRAY<STRING>, p STRUCT<a: INT, b: INT>") as [column, type] pairs.
function schemaColumns(ddl) {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < ddl.length; i++) {
    const c = ddl[i];
    if (c === "<" || c === "(") depth++;
    else if (c === ">" || c === ")") depth--;
    else if (c === "," && depth === 0) parts.push(ddl.slice(start, i)), (start = i + 1);
  }
  parts.push(ddl.slice(start));
  return parts
    .map((p) => p.trim())
    .filter(Boolean)
    .map((p) => {
      const m = p.match(/^(`[^`]*`|\S+)\s+([\s\S]*)$/);
      return m ? [m[1].replaceAll("`", ""), m[2]] : [p, ""];
    });
}

function connectorRow(name) {
  const link = el("a", { href: "#/connector/" + encodeURIComponent(name) }, name);
  return el(
    "tr",
    { "data-name": name },
    el("td", {}, link, el("div", { class: "muted", "data-cell": "type" })),
    el("td", { "data-cell": "state" }),
    el("td", { "data-cell": "rate" }),
    el("td", { "data-cell": "lag" }),
    el("td", { "data-cell": "read" }),
    el("td", { "data-cell": "written" }),
    el("td", { "data-cell": "error", class: "error" }),
    el("td", {}, actionButtons(name)),
  );
}

function fillRow(tr, name) {
  const { info, row } = store.connectors.get(name);
  const h = store.history.get(name) || { rate: [], lag: [] };
  const cell = (c) => tr.querySelector(`[data-cell="${c}"]`);
  cell("type").textContent = `${info.type} · ${info.config["connector.class"]}`;
  cell("state").replaceChildren(stateBadge(row.state));
  showActions(tr, row.state);
  cell("rate").replaceChildren(sparkline(h.rate, "rate"), el("span", { class: "value" }, number(row.rows_per_sec)));
  cell("lag").replaceChildren(sparkline(h.lag, "lag"), el("span", { class: "value" }, number(row.lag)));
  cell("read").textContent = number(row.rows_total);
  cell("written").textContent = number(row.rows_written);
  cell("error").textContent = row.last_error || "";
  cell("error").title = row.last_error || "";
}

async function create() {
  const text = $("#create-sql").value.trim();
  $("#create-error").textContent = "";
  if (!text) return;
  try {
    const info = await api("POST", "/connectors", text);
    $("#create-sql").value = "";
    notify(`Created connector ${info.name}`);
    await refresh();
    view.update();
  } catch (e) {
    $("#create-error").textContent = e.message;
  }
}

async function runSql() {
  const out = $("#sql-results");
  const text = $("#sql-text").value;
  out.replaceChildren(el("p", { class: "muted" }, "running…"));
  let results;
  let failure = null;
  try {
    results = (await api("POST", "/sql", { sql: text })).results;
  } catch (e) {
    failure = e;
    results = (e.body && e.body.results) || [];
  }
  out.replaceChildren(
    ...results.map((r) =>
      el(
        "div",
        { class: "result" },
        el("div", { class: "statement" }, `line ${r.line}: ${r.statement}`),
        r.message ? el("p", { class: r.warning ? "warning" : "message" }, r.message) : null,
        r.columns ? table(r.columns, r.rows) : null,
        r.columns ? el("p", { class: "muted" }, `${r.rows.length} row(s)`) : null,
      ),
    ),
    failure ? el("p", { class: "error", id: "sql-error" }, failure.message) : null,
  );
  if (!failure) refresh().then(() => view.update());
}

// ------------------------------------------------------------------ routing and start

const view = {
  current: null,
  args: [],
  update() {
    if (this.current) this.current.update(...this.args);
    summarize();
  },
  changed(name) {
    if (this.current) this.current.changed(name);
  },
};

async function route() {
  const [, page = "", arg] = location.hash.split("/").map(decodeURIComponent);
  const which = page === "connector" ? "connector" : page === "streams" ? "streams" : page === "sql" ? "sql" : "overview";
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.view === which || (which === "connector" && a.dataset.view === "overview")));
  const main = $("#main");
  main.replaceChildren();
  view.current = views[which];
  view.args = [];
  try {
    await views[which].render(main, arg);
  } catch (e) {
    main.append(el("p", { class: "error" }, e.message));
  }
  view.update();
}

function summarize() {
  const counts = {};
  for (const { row } of store.connectors.values()) counts[row.state] = (counts[row.state] || 0) + 1;
  const parts = Object.entries(counts).map(([s, n]) => `${n} ${s.toLowerCase()}`);
  $("#summary").textContent = `${store.connectors.size} connector(s)` + (parts.length ? ": " + parts.join(", ") : "");
}

let started = false;

async function start() {
  try {
    await refresh();
  } catch (e) {
    if (e.status !== 401) notify(e.message, "error");
    return;
  }
  if (sessionStorage.getItem(TOKEN_KEY)) $("#logout").hidden = false;
  await route();
  follow();
  if (!started) {
    started = true;
    window.addEventListener("hashchange", route);
    setInterval(sample, 1000);
  }
}

$("#login-form").addEventListener("submit", logIn);
$("#logout").addEventListener("click", logOut);
$("#notice-close").addEventListener("click", () => ($("#notice").hidden = true));
start();
