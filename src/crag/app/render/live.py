"""The live page `crag serve` answers at `/`: ask a question, watch the workflow's graph light up
step by step as the server's event stream arrives, then read why the run went as it did.

One self-contained page: the graph is the same inline SVG as `crag draw` (every step given room
for its time), and a small inline script drives it from the server's own routes:

    GET  /v1/models                     the collections the key may ask ("crag", "crag:hr")
    POST /workflows/{model}/run-nowait  start a run in the collection picked
    GET  /events/{id}?sse=false         its StepProgressEvents, as lines of JSON
    GET  /handlers/{id}/explanation     the finished run's why (`explanation_html`)
    GET  /handlers?limit=15             recent runs, each linked to /handlers/{id}/trace

The page is the same for every caller: what a key may see comes from the server's routes,
which answer only of that key's collections. A server that serves the key more than one
collection gets a picker beside the question, and each recent run names its collection;
with one, the page shows neither.

With an API key on the server, the page asks for it once and keeps it in the tab only
(`sessionStorage`), sending it as `Authorization: Bearer KEY`.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape

from workflows import Workflow

from crag.app.render.explain import CSS as EXPLAIN_CSS
from crag.app.render.layout import graph_of, layout
from crag.app.render.overlay import CSS as TRACE_CSS
from crag.app.render.svg import page, svg

PLACEHOLDER = " " * 16  # room under each step's name for its time and calls

CSS = """\
.crag form { margin: 6px 0 12px; display: flex; gap: 8px; max-width: 900px; }
.crag form[hidden] { display: none; }
.crag input[type=text], .crag input[type=password] { flex: 1; font-size: 16px; padding: 6px 10px;
  border: 1px solid #94a3b8; border-radius: 6px; }
.crag button { font-size: 15px; padding: 6px 16px; border-radius: 6px; border: 1px solid #1d4ed8;
  background: #1d4ed8; color: #fff; cursor: pointer; } .crag button:disabled { opacity: .5; }
.crag .status { color: #334155; min-height: 1.4em; } .crag .status.error { color: #b91c1c; }
.crag .live-row { display: flex; flex-wrap: wrap; gap: 8px 28px; align-items: flex-start; }
.crag .side { flex: 1 1 420px; min-width: 360px; }
.crag .runs { font-size: 14px; padding-left: 18px; } .crag .runs a { color: #1d4ed8; }
.crag .runs .verdict-tag { font-weight: 600; } .crag .runs .collection-tag { color: #64748b; }
.crag select { font-size: 15px; padding: 6px 8px; border: 1px solid #94a3b8; border-radius: 6px; }
.live .node:not(.on) rect { fill: #f8fafc; stroke: #cbd5e1; }
.live .node:not(.on) text { fill: #94a3b8; }
.live path.edge { stroke: #cbd5e1; marker-end: url(#crag-arrow-dim); }
.live path.edge.on { stroke: #1d4ed8; stroke-width: 2.6; marker-end: url(#crag-arrow-lit); }
.live .node.step.running rect { stroke: #f59e0b; stroke-width: 3.5; }
.live .node.step.done rect { stroke-width: 2.5; }
.live .node.step.degraded rect { stroke: #d97706; stroke-dasharray: 5 3; stroke-width: 3; }
.live .node.step.error rect { stroke: #dc2626; stroke-width: 3; }
"""

SCRIPT = r"""
(() => {
  const KEY = "crag-api-key";
  const $ = (id) => document.getElementById(id);
  const live = window.cragLive = { order: [], finished: [], overlaps: [], handler: null, done: false,
                                   answer: "", grown: [], models: [] };
  const node = (id) => document.querySelector(`.live .node[data-id="${CSS.escape(id)}"]`);
  const edges = () => Array.from(document.querySelectorAll(".live path.edge"));
  const running = new Set();

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const key = sessionStorage.getItem(KEY);
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }
  async function api(path, options) {
    const opts = Object.assign({}, options || {});
    opts.headers = headers(opts.headers);
    const reply = await fetch(path, opts);
    if (reply.status === 401) {
      $("key-form").hidden = false;
      throw new Error("This server needs its API key: enter it above (kept in this tab only).");
    }
    return reply;
  }
  // A model id names a collection: "crag" the default one, "crag:hr" the collection "hr".
  const collectionOf = (model) => (model === "crag" ? "default" : model.replace(/^crag:/, ""));
  async function models() {  // the collections this key may ask: a picker when there are several
    let reply;
    try { reply = await api("/v1/models"); } catch (err) { return; }
    if (!reply.ok) return;
    live.models = ((await reply.json()).data || []).map((m) => m.id);
    const picker = $("collection");
    picker.innerHTML = "";
    for (const id of live.models) {
      const option = document.createElement("option");
      option.value = id;
      option.textContent = collectionOf(id);
      picker.append(option);
    }
    picker.hidden = live.models.length < 2;
  }
  const picked = () => $("collection").value || live.models[0] || "crag";
  function say(text, error) {
    const s = $("status");
    s.textContent = text;
    s.classList.toggle("error", !!error);
  }
  function fmt(s) {
    if (s < 0.01) return (s * 1000).toFixed(1) + " ms";
    return s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(2) + " s";
  }
  function light(id) {
    const n = node(id);
    if (n && !n.classList.contains("on")) {
      n.classList.add("on");
      n.dataset.order = live.order.length;
    }
    return n;
  }
  function lightEdge(source, target) {
    for (const e of edges()) if (e.dataset.edge === `${source} ${target}`) e.classList.add("on");
  }
  function reset() {
    document.querySelectorAll(".live .node").forEach((n) => {
      n.classList.remove("on", "running", "done", "degraded", "error");
      delete n.dataset.order;
      const note = n.querySelector("text.note");
      if (note) note.textContent = "";
    });
    edges().forEach((e) => e.classList.remove("on"));
    running.clear();
    Object.assign(live, { order: [], finished: [], overlaps: [], handler: null, done: false, answer: "", grown: [] });
    $("result").innerHTML = "";
  }
  function onStep(ev) {
    if (ev.status === "started") {
      live.order.push(ev.step);
      const n = light(ev.step);
      if (n) n.classList.add("running");
      running.add(ev.step);
      live.overlaps.push(Array.from(running).sort());
      for (const e of edges()) {  // the events that started this step
        const [source, target] = e.dataset.edge.split(" ");
        if (target === ev.step && node(source) && node(source).classList.contains("on")) e.classList.add("on");
      }
      say(`${ev.step} running…`);
      return;
    }
    running.delete(ev.step);
    live.finished.push(ev.step);
    const n = node(ev.step), rec = ev.record || {};
    if (n) {
      n.classList.remove("running");
      n.classList.add("done");
      if (rec.degraded) n.classList.add("degraded");
      if (rec.error) n.classList.add("error");
      const parts = [fmt(ev.seconds || 0)];
      if (rec.llm_calls) parts.push(`${rec.llm_calls} LLM`);
      if (rec.search_calls) parts.push(`${rec.search_calls} search`);
      if (rec.prompt_tokens || rec.completion_tokens) parts.push(`${rec.prompt_tokens + rec.completion_tokens} tok`);
      if (rec.cache_hits) parts.push(`${rec.cache_hits} cached`);
      const note = n.querySelector("text.note");
      if (note) note.textContent = parts.join(" · ");
      const title = n.querySelector("title");
      if (title && rec.degraded) title.textContent += `\ndegraded: ${rec.degraded}`;
    }
    for (const out of rec.output_events || []) {
      light(out);
      lightEdge(ev.step, out);
    }
  }
  function onDelta(ev) {  // the answer grows in place as it is written; the explanation replaces it
    live.answer = ev.restart ? "" : live.answer + (ev.delta || "");
    let growing = $("growing-answer");
    if (!growing) {
      $("result").innerHTML = '<h2>Answer</h2><p class="answer" id="growing-answer"></p>';
      growing = $("growing-answer");
    }
    growing.textContent = live.answer;
    live.grown.push(growing.textContent);
  }
  async function follow(handler) {
    const reply = await api(`/events/${encodeURIComponent(handler)}?sse=false&after_sequence=-1`);
    if (reply.status === 200 && reply.body) {
      const reader = reply.body.getReader(), decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, cut).trim();
          buffer = buffer.slice(cut + 1);
          if (!line) continue;
          const envelope = JSON.parse(line);
          if (envelope.type === "StepProgressEvent") onStep(envelope.value);
          if (envelope.type === "AnswerDeltaEvent") onDelta(envelope.value);
        }
      }
    }
  }
  async function explain(handler) {
    for (let tries = 0; tries < 50; tries++) {
      const reply = await api(`/handlers/${encodeURIComponent(handler)}/explanation`);
      if (reply.status === 200) {
        $("result").innerHTML = await reply.text();
        return true;
      }
      if (reply.status !== 409) {
        say((await reply.json()).detail || `the server answered ${reply.status}`, true);
        return false;
      }
      const body = await reply.json();
      if (!/not finished/.test(body.detail || "")) { say(body.detail, true); return false; }
      await new Promise((r) => setTimeout(r, 100));
    }
    say("The run did not finish in time.", true);
    return false;
  }
  async function ask(question) {
    reset();
    $("ask-button").disabled = true;
    try {
      say("starting…");
      const reply = await api(`/workflows/${encodeURIComponent(picked())}/run-nowait`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ start_event: { query: question } }),
      });
      const body = await reply.json();
      if (!reply.ok) throw new Error(body.detail || body.error || `the server answered ${reply.status}`);
      live.handler = body.handler_id;
      light("QueryStartEvent");
      await follow(live.handler);
      if (await explain(live.handler)) say(`finished: ${live.finished.length} steps`);
      live.done = true;
      await recent();
    } catch (err) {
      say(String(err.message || err), true);
    } finally {
      $("ask-button").disabled = false;
    }
  }
  async function recent() {
    let reply;
    try { reply = await api("/handlers?limit=15"); } catch (err) { return; }
    if (!reply.ok) return;
    const list = (await reply.json()).handlers || [];
    list.sort((a, b) => (b.started_at || "").localeCompare(a.started_at || ""));
    const ul = $("runs");
    ul.innerHTML = "";
    for (const h of list.slice(0, 15)) {
      const result = (h.result && h.result.value && h.result.value.result) || {};
      const li = document.createElement("li");
      const a = document.createElement("a");
      a.href = `/handlers/${encodeURIComponent(h.handler_id)}/trace`;
      a.textContent = result.query || h.handler_id;
      a.addEventListener("click", async (event) => {  // with a key, the link needs the header too
        if (!sessionStorage.getItem(KEY)) return;
        event.preventDefault();
        const page = await api(a.getAttribute("href"));
        window.open(URL.createObjectURL(new Blob([await page.text()], { type: "text/html" })), "_blank");
      });
      const tag = document.createElement("span");
      tag.className = "verdict-tag";
      tag.textContent = ` ${result.verdict || h.status}`;
      li.append(a, tag);
      if (live.models.length > 1) {  // several collections: say which one each run asked
        const where = document.createElement("span");
        where.className = "collection-tag";
        where.textContent = ` · ${collectionOf(h.workflow_name || "crag")}`;
        li.append(where);
      }
      li.append(` · ${(h.started_at || "").replace("T", " ").slice(0, 19)}`);
      ul.append(li);
    }
  }
  $("result").addEventListener("click", async (event) => {  // a cited document, at its page
    const a = event.target.closest("a.crag-file");
    if (!a || !sessionStorage.getItem(KEY)) return;  // no key: the plain link works
    event.preventDefault();
    const [path, page] = a.getAttribute("href").split("#");
    const reply = await api(path);
    if (!reply.ok) { say(`the server answered ${reply.status}`, true); return; }
    // A blob: page is this page's origin, beside its key, without the sandbox /files answers
    // with: only types that run nothing are opened; anything else (HTML) is saved instead.
    const type = reply.headers.get("content-type") || "";
    const shown = /^(application\/pdf|text\/plain|image\/(png|jpeg|gif|webp))(;|$)/i.test(type);
    const blob = new Blob([await reply.arrayBuffer()], { type: shown ? type : "application/octet-stream" });
    const url = URL.createObjectURL(blob);
    if (shown) { window.open(url + (page ? `#${page}` : ""), "_blank"); return; }
    const save = document.createElement("a");
    save.href = url;
    save.download = a.textContent || "document";
    save.click();
  });
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const q = $("question").value.trim();
    if (q) ask(q);
  });
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("key").value);
    $("key-form").hidden = true;
    say("key kept in this tab");
    models().then(recent);
  });
  models().then(recent);
})();
"""


# The page's one script, named by its hash rather than allowed as any inline script: so a
# `javascript:` link, an inline event handler or a <script> that reached the page by way of a
# document (the explanation is drawn from documents' text and addresses) runs nothing, even
# if something let it through. Styles inline; requests to this server only.
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
LIVE_CSP = ("default-src 'none'; style-src 'unsafe-inline'; "
            f"script-src 'sha256-{SCRIPT_HASH}'; connect-src 'self'")


def live_html(workflow: Workflow | type[Workflow], *, title: str = "crag, live") -> str:
    """The live page for a workflow served as `crag` (see the module docstring)."""
    graph = graph_of(workflow)
    notes = {n.id: PLACEHOLDER for n in graph.nodes if n.node_type == "step"}
    drawing = svg(layout(graph, notes))
    body = f"""<h1>{escape(title)}</h1>
<p>Ask a question: each step lights up as it runs, with its time, then the answer and why.</p>
<form id="key-form" hidden><input type="password" id="key" placeholder="this server's API key"
 autocomplete="off"><button>Use key</button></form>
<form id="ask-form"><select id="collection" aria-label="collection" hidden></select>
<input type="text" id="question" placeholder="Who invented the lithium-ion battery?"
 autocomplete="off"><button id="ask-button">Ask</button></form>
<p id="status" class="status"></p>
<div class="live-row">
<figure class="live">{drawing}</figure>
<div class="side"><div id="result"></div>
<h2>Recent runs</h2><ul id="runs" class="runs"></ul></div>
</div>
<script>{SCRIPT}</script>"""
    return page(title, body, TRACE_CSS + EXPLAIN_CSS + CSS, csp=LIVE_CSP)
