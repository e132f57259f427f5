// The node's dashboard: reads the same API as `mur` (the same token policy), every two
// seconds, and follows task changes live from `GET /v1/tasks/events`. Everything a peer
// or a client named (capsules, agents, task text) is put on the page as text, never as
// markup.
"use strict";

const TOKEN_KEY = "murmur.token";
const REFRESH_MS = 2000;
const TASKS_SHOWN = 50;
const FLASH_MS = 2500;
const TERMINAL = new Set(["completed", "failed", "canceled", "rejected"]);
const KEY_METRICS = [
  ["murmur_peers_connected", "peers connected"],
  ["murmur_directory_nodes", "nodes in the directory"],
  ["murmur_directory_capsules", "capsules in the directory"],
  ["murmur_tasks_routed_total", "tasks routed"],
  ["murmur_task_refusals_total", "tasks refused"],
  ["murmur_adverts_accepted_total", "adverts accepted"],
  ["murmur_adverts_refused_total", "adverts refused"],
  ["murmur_gossip_messages_total", "gossip messages"],
  ["murmur_artifact_requests_served_total", "artifact requests served"],
  ["murmur_endpoint_sessions_open", "model sessions open"],
  ["murmur_ping_failures_total", "ping failures"],
];

let token = sessionStorage.getItem(TOKEN_KEY);
let loginWaiters = [];
const tasks = new Map(); // id → { id, capsule, state, owner, result }
const flashed = new Map(); // id → when it changed
let localPeer = "";

class Unauthorized extends Error {}

const $ = (selector) => document.querySelector(selector);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A request to the node, with the token when there is one. A 401 asks for a token. */
async function api(path, init = {}) {
  const headers = new Headers(init.headers || {});
  if (token) headers.set("Authorization", `Bearer ${token}`);
  const response = await fetch(path, { ...init, headers, cache: "no-store" });
  if (response.status === 401) {
    const body = await response.json().catch(() => null);
    askForToken(body?.error?.message);
    throw new Unauthorized();
  }
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new Error(`${path}: ${response.status} ${body?.error?.message ?? response.statusText}`);
  }
  return response;
}

const getJson = async (path) => (await api(path)).json();

async function rpc(method, params) {
  const response = await api("/a2a", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  const body = await response.json();
  if (body.error) throw new Error(`${method}: ${body.error.message}`);
  return body.result;
}

function askForToken(message) {
  $("#panels").hidden = true;
  $("#login").hidden = false;
  const error = $("#login-error");
  error.hidden = !token;
  error.textContent = token ? `The node refused the token: ${message ?? "unauthorized"}` : "";
}

/** Resolves once a token was entered. */
const loggedIn = () => new Promise((resolve) => loginWaiters.push(resolve));

$("#login").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("#token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  $("#login").hidden = true;
  $("#panels").hidden = false;
  const waiters = loginWaiters;
  loginWaiters = [];
  waiters.forEach((resolve) => resolve());
});

// ---- rendering ----------------------------------------------------------------------

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

function stateCell(state) {
  return el("td", state, { class: "state", "data-state": state });
}

/** Replaces a table's rows: `cells(item)` gives the row's cells, `key(item)` its id. */
function fill(table, items, key, cells, empty) {
  const body = $(`${table} tbody`);
  body.replaceChildren();
  if (items.length === 0) {
    const row = el("tr");
    row.append(el("td", empty, { class: "empty", colspan: "9" }));
    body.append(row);
    return;
  }
  for (const item of items) {
    const row = el("tr", null, key(item));
    row.append(...cells(item));
    body.append(row);
  }
}

const short = (peer) => (peer && peer.length > 14 ? `…${peer.slice(-8)}` : peer || "");

function peerCell(peer) {
  const me = peer === localPeer;
  return el("td", me ? `${short(peer)} (this node)` : short(peer), { class: "mono", title: peer });
}

function ago(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return "now";
  if (ms < 60_000) return `${Math.round(ms / 1000)} s ago`;
  return `${Math.round(ms / 60_000)} min ago`;
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

function duration(secs) {
  if (secs < 60) return `${secs} s`;
  if (secs < 3600) return `${Math.floor(secs / 60)} min ${secs % 60} s`;
  return `${Math.floor(secs / 3600)} h ${Math.floor((secs % 3600) / 60)} min`;
}

function peerState(p) {
  if (p.held_ms !== null && p.held_ms !== undefined) return "refused";
  if (p.connected && !p.admitted) return "not admitted";
  return p.connected ? "connected" : "known";
}

function renderStatus(status) {
  localPeer = status.peer_id;
  $("#node-id").textContent = short(status.peer_id);
  $("#node-id").title = status.peer_id;
  $("#node-version").textContent = `murnode ${status.version}`;
  $("#node-uptime").textContent = `up ${duration(status.uptime_secs)}`;
  const tasksByState = Object.entries(status.tasks).map(([s, n]) => `${n} ${s}`).join(", ") || "none";
  const facts = [
    ["peer id", status.peer_id],
    ["API", status.api],
    ["listening", status.listen_addrs.join(" ")],
    ["peers", `${status.peers_connected} connected, ${status.peers_known} known, ${status.peers_held_off} refused`],
    ["directory", `${status.directory_nodes} nodes, ${status.directory_capsules} capsules`],
    ["runs", status.installed.join(", ") || "no capsules"],
    ["agents", `${status.agents_running} of ${status.agents} running`],
    ["MCP servers", `${status.mcp_up} of ${status.mcp} up`],
    ["tasks owned", tasksByState],
  ];
  const list = $("#summary");
  list.replaceChildren();
  for (const [name, value] of facts) list.append(el("dt", name), el("dd", value));
}

function renderPeers(view) {
  const peers = view.peers;
  $("#peers-count").textContent = `${peers.filter((p) => p.connected).length} connected of ${peers.length}`;
  fill("#peers", peers, (p) => ({ "data-peer": p.peer_id, "data-state": peerState(p) }), (p) => [
    peerCell(p.peer_id),
    stateCell(peerState(p)),
    el("td", p.rtt_ms === null || p.rtt_ms === undefined ? "" : `${p.rtt_ms.toFixed(1)} ms`),
    el("td", ago(p.last_seen_ms)),
    el("td", p.capsules),
    el("td", p.addrs.join(" "), { class: "mono" }),
  ], "no peers yet");
}

function renderCapsules(view) {
  const rows = view.capsules.flatMap((c) => c.providers.map((p, i) => ({ name: c.name, first: i === 0, ...p })));
  $("#capsules-count").textContent = `${view.capsules.length}`;
  fill("#capsules", rows, (r) => ({ "data-capsule": r.name, "data-peer": r.peer_id }), (r) => [
    el("td", r.first ? r.name : ""),
    peerCell(r.peer_id),
    el("td", r.version),
    el("td", `${(r.load / 10).toFixed(1)} %`),
  ], "no capsules in the mesh");
}

function renderAgents(agents, models) {
  fill("#agents", agents.agents, (a) => ({ "data-agent": a.name }), (a) => [
    el("td", a.name),
    peerCell(a.node),
    el("td", a.brain),
    stateCell(a.state),
  ], "no agents in the mesh");
  fill("#models", models.data, (m) => ({ "data-model": m.id }), (m) => [
    el("td", m.id),
    el("td", m.served_by.map(short).join(", "), { class: "mono", title: m.served_by.join("\n") }),
  ], "no models served");
}

function renderArtifacts(view) {
  $("#artifacts-count").textContent = `${view.artifacts.length}`;
  const pulls = $("#pulls");
  pulls.replaceChildren();
  for (const pull of view.pulls) {
    const line = el("div", null, { class: "pull", "data-pull": `${pull.name}@${pull.version}` });
    const bar = el("progress", null, { max: String(pull.size || 1), value: String(pull.written) });
    const percent = pull.size ? Math.floor((100 * pull.written) / pull.size) : 0;
    line.append(
      el("span", `pulling ${pull.name}@${pull.version} `),
      bar,
      el("span", ` ${pull.state}, ${bytes(pull.written)} of ${bytes(pull.size)} (${percent} %) from ${pull.providers} providers`),
    );
    pulls.append(line);
  }
  fill("#artifacts", view.artifacts, (a) => ({ "data-artifact": `${a.name}@${a.version}` }), (a) => [
    el("td", `${a.name}@${a.version}`),
    el("td", a.kind),
    el("td", bytes(a.size)),
    el("td", a.content.slice(0, 19), { class: "mono", title: a.content }),
  ], "the store is empty");
}

function renderMetrics(text) {
  const values = new Map();
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || !line.trim()) continue;
    const name = line.split(/[{ ]/, 1)[0];
    const value = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (!Number.isNaN(value)) values.set(name, (values.get(name) ?? 0) + value);
  }
  const rows = KEY_METRICS.filter(([name]) => values.has(name));
  fill("#metrics", rows, ([name]) => ({ "data-metric": name, title: name }), ([name, label]) => [
    el("td", label),
    el("td", values.get(name)),
  ], "no metrics");
}

function taskResult(task) {
  const parts = task.artifacts?.[0]?.parts ?? [];
  const text = parts.map((p) => p.text ?? "").join("");
  const reason = task.status?.message?.parts?.map((p) => p.text ?? "").join("") ?? "";
  return (text || reason).slice(0, 120);
}

function renderTasks() {
  const shown = [...tasks.values()].slice(0, TASKS_SHOWN);
  $("#tasks-count").textContent = `${tasks.size}`;
  const now = Date.now();
  fill("#tasks", shown, (t) => {
    const attrs = { "data-task": t.id, "data-state": t.state };
    if (now - (flashed.get(t.id) ?? 0) < FLASH_MS) attrs.class = "flash";
    return attrs;
  }, (t) => [
    el("td", t.id.slice(0, 8), { class: "mono", title: t.id }),
    el("td", t.capsule),
    stateCell(t.state),
    peerCell(t.owner),
    el("td", t.result),
  ], "no tasks yet");
}

// ---- data -----------------------------------------------------------------------------

async function listTasks() {
  const result = await rpc("tasks/list", { pageSize: TASKS_SHOWN });
  const listed = new Map();
  for (const task of result.tasks ?? []) {
    const murmur = task.metadata?.murmur ?? {};
    const known = tasks.get(task.id);
    const listedTask = {
      id: task.id,
      capsule: murmur.capsule ?? known?.capsule ?? "",
      state: task.status?.state ?? "",
      seq: murmur.seq ?? 0,
      owner: murmur.owner ?? "",
      result: taskResult(task),
    };
    // A change that arrived live after the owner answered keeps its newer state.
    if (known && known.seq > listedTask.seq) {
      listedTask.state = known.state;
      listedTask.seq = known.seq;
    }
    listed.set(task.id, listedTask);
  }
  // A task that appeared live after the owner answered stays until the next list.
  const now = Date.now();
  const fresh = [...tasks.values()].filter((t) => !listed.has(t.id) && now - (flashed.get(t.id) ?? 0) < FLASH_MS);
  tasks.clear();
  for (const task of fresh) tasks.set(task.id, task);
  for (const [id, task] of listed) tasks.set(id, task);
  renderTasks();
}

let relist = null;
/** Lists the tasks again soon (a burst of changes makes one request). */
function relistSoon() {
  if (relist) return;
  relist = setTimeout(() => {
    relist = null;
    listTasks().catch(showError);
  }, 300);
}

function onTaskChange(change) {
  const known = tasks.get(change.task_id);
  const task = known ?? { id: change.task_id, capsule: change.capsule, owner: localPeer, result: "" };
  if (known && known.seq && known.seq >= change.seq) return;
  task.state = change.state;
  task.seq = change.seq;
  if (!known) {
    // Newest first.
    const rest = [...tasks.entries()];
    tasks.clear();
    tasks.set(task.id, task);
    for (const [id, t] of rest) tasks.set(id, t);
  }
  flashed.set(task.id, Date.now());
  renderTasks();
  if (TERMINAL.has(change.state)) relistSoon(); // for its result
}

/** Reads the SSE stream of task changes; reconnects when it breaks. */
async function follow() {
  for (;;) {
    try {
      const response = await api("/v1/tasks/events", { headers: { Accept: "text/event-stream" } });
      setLive(true);
      relistSoon(); // what changed while the stream was down
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          onBlock(block);
        }
      }
    } catch (error) {
      if (error instanceof Unauthorized) {
        setLive(false);
        await loggedIn();
        continue;
      }
      showError(error);
    }
    setLive(false);
    await sleep(REFRESH_MS);
  }
}

function onBlock(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // keep-alive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    if (field === "data") data.push(value);
  }
  if (data.length === 0) return;
  if (event === "task") onTaskChange(JSON.parse(data.join("\n")));
  if (event === "lagged") relistSoon();
}

function setLive(on) {
  const badge = $("#live");
  badge.dataset.live = on ? "on" : "off";
  badge.textContent = on ? "live" : "live: off";
}

function showError(error) {
  if (error instanceof Unauthorized) return;
  $("#error").textContent = `${new Date().toLocaleTimeString()}: ${error.message}`;
}

async function refresh() {
  const health = $("#health");
  try {
    const status = await getJson("/v1/status");
    renderStatus(status);
    health.dataset.health = "ok";
    health.textContent = "healthy";
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    health.dataset.health = "down";
    health.textContent = "not answering";
    throw error;
  }
  const steps = [
    getJson("/v1/peers").then(renderPeers),
    getJson("/v1/capsules").then(renderCapsules),
    Promise.all([getJson("/v1/agents"), getJson("/v1/models")]).then(([a, m]) => renderAgents(a, m)),
    getJson("/v1/artifacts").then(renderArtifacts),
    api("/metrics").then((r) => r.text()).then(renderMetrics),
    listTasks(),
  ];
  const outcomes = await Promise.allSettled(steps);
  const failed = outcomes.find((o) => o.status === "rejected");
  if (failed) throw failed.reason;
  $("#error").textContent = "";
}

async function loop() {
  for (;;) {
    try {
      await refresh();
    } catch (error) {
      if (error instanceof Unauthorized) {
        await loggedIn();
        continue;
      }
      showError(error);
    }
    await sleep(REFRESH_MS);
  }
}

loop();
follow();
