// The page: session list, transcript, queued messages, composer, interrupt and permission
// answers.
//
// Opening a session loads its snapshot (the durable transcript and the sequence number it is
// current to), draws it, then follows the session's events from that number with an
// EventSource. The browser reconnects on its own with Last-Event-ID; events at or below the
// last number applied are ignored, and a `reset` event (the number cannot be continued)
// replaces the whole view with the snapshot it carries. Reloading the page in the middle of a
// turn therefore shows the true state and goes on live.
//
// A message sent while a turn runs is queued on the server; the queue shown is the snapshot's
// and the queue's events only (never the POST's answer, which can arrive after the message's
// turn has already started), so a reload or a replay shows the same list.

import { Api, ApiError } from "./api.js";
import { QUEUE_EVENTS, Transcript } from "./model.js";
import { Sidebar } from "./sidebar.js";
import { QueueView, TranscriptView, formatUsage } from "./view.js";

const EVENT_TYPES = [
  "turn_started",
  "step_started",
  "text_delta",
  "thinking_delta",
  "retry",
  "assistant_message",
  "tool_state",
  "tool_start",
  "tool_done",
  "tool_results",
  "hook",
  "permission_request",
  "usage",
  "compacted",
  "worker",
  "done",
  "incomplete",
  "error",
  "turns_rewound",
  "message_queued",
  "message_cancelled",
  "message_started",
  "reset",
  "status",
];
const TERMINAL = new Set(["done", "incomplete", "error"]);

const $ = (id) => document.getElementById(id);

class App {
  constructor() {
    this.api = new Api((wasWrong) => this.askToken(wasWrong));
    this.model = new Transcript();
    this.view = new TranscriptView($("transcript"), this.model, (turnId, callId, requestId, decision) =>
      this.decide(turnId, callId, requestId, decision),
    );
    this.queueView = new QueueView($("queue"), $("queue-list"), this.model, (messageId) =>
      this.cancelQueued(messageId),
    );
    this.sidebar = new Sidebar(this);
    this.sessionId = null;
    this.loaded = false; // the open session's snapshot is in the model
    this.source = null;
    this.dirty = new Set();
    this.renderTimer = null;
    this.reconnectTimer = null;
    this.generation = 0;
  }

  start() {
    $("new-session").addEventListener("click", () => this.newSession());
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.send();
      }
    });
    $("interrupt").addEventListener("click", () => this.interrupt());
    this.sidebar.start();
    window.addEventListener("hashchange", () => this.route());
    this.route();
  }

  // -- routing and sessions --------------------------------------------------------------------

  route() {
    const match = /^#\/sessions\/([^/]+)$/.exec(location.hash);
    const id = match ? decodeURIComponent(match[1]) : null;
    if (id !== this.sessionId || !id) this.open(id);
  }

  async newSession() {
    try {
      const { id } = await this.api.createSession();
      location.hash = `#/sessions/${encodeURIComponent(id)}`;
    } catch (err) {
      this.flash(`could not create a session: ${err.message}`);
    }
  }

  async open(id) {
    this.generation += 1;
    this.disconnect();
    this.sessionId = id;
    this.loaded = false;
    this.sidebar.setOpen(false); // on a narrow screen the drawer makes way for the session
    this.model.load(null);
    this.view.clear();
    this.queueView.render();
    $("main").dataset.session = id || "";
    this.updateHeader();
    this.sidebar.refresh();
    if (id) await this.loadSnapshot(this.generation);
  }

  // -- what the sidebar asks of the page -----------------------------------------------------

  /** Whether the open session's turn runs, once its snapshot is loaded (else null). */
  runningHere() {
    return this.loaded ? Boolean(this.model.runningTurnId) : null;
  }

  sessionsChanged() {
    this.updateHeader();
  }

  deleted(id) {
    if (id === this.sessionId) location.hash = "#/";
  }

  async loadSnapshot(generation) {
    let snapshot;
    try {
      snapshot = await this.api.snapshot(this.sessionId);
    } catch (err) {
      if (generation !== this.generation) return;
      if (err instanceof ApiError && err.status === 404) {
        this.flash(`no session ${this.sessionId}`);
        return;
      }
      this.setConnection("offline");
      this.scheduleReconnect(generation);
      return;
    }
    if (generation !== this.generation) return;
    this.applySnapshot(snapshot);
    this.connect(generation);
  }

  applySnapshot(snapshot) {
    this.model.load(snapshot);
    this.loaded = true;
    this.dirty.clear();
    this.view.renderAll();
    this.queueView.render();
    this.updateHeader();
    this.scrollToEnd();
  }

  // -- the event stream ----------------------------------------------------------------------

  connect(generation) {
    this.disconnect();
    const source = new EventSource(this.api.eventsUrl(this.sessionId, this.model.lastId));
    this.source = source;
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (e) => {
        if (this.source === source) this.onEvent(type, e);
      });
    }
    source.onopen = () => this.setConnection("live");
    source.onerror = () => {
      if (this.source !== source) return;
      if (source.readyState === EventSource.CLOSED) {
        // The server refused the stream (or it is gone): start again from a fresh snapshot.
        this.disconnect();
        this.setConnection("offline");
        this.scheduleReconnect(generation);
      } else {
        this.setConnection("reconnecting");
      }
    };
  }

  disconnect() {
    clearTimeout(this.reconnectTimer);
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  scheduleReconnect(generation) {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => {
      if (generation === this.generation) this.loadSnapshot(generation);
    }, 1000);
  }

  onEvent(type, e) {
    let data;
    try {
      data = JSON.parse(e.data);
    } catch {
      return;
    }
    if (type === "reset") {
      this.applySnapshot(data);
      if (e.lastEventId) this.model.lastId = Number(e.lastEventId);
      return;
    }
    if (type === "status") {
      this.model.runningTurnId = data.running_turn_id || null;
      this.updateHeader();
      return;
    }
    const seq = Number(e.lastEventId || data.seq || 0);
    if (seq && seq <= this.model.lastId) return; // already applied (a replay overlap)
    if (seq) this.model.lastId = seq;
    const turnId = this.model.applyEvent({ ...data, type });
    if (QUEUE_EVENTS.has(type)) this.queueView.render();
    if (turnId) this.dirty.add(turnId);
    if (type === "turns_rewound") for (const id of data.turn_ids || []) this.dirty.add(id);
    // A turn starting or ending changes which earlier turns still hold pending work.
    if (type === "turn_started" || TERMINAL.has(type)) for (const id of this.model.order) this.dirty.add(id);
    this.scheduleRender();
    if (type === "turn_started" || TERMINAL.has(type)) {
      if (TERMINAL.has(type)) this.flash("");
      this.updateHeader();
      this.sidebar.refresh();
    }
  }

  scheduleRender() {
    if (this.renderTimer !== null) return;
    // Batches the deltas of one burst into one redraw (a timer, not an animation frame, so a
    // tab in the background keeps up too).
    this.renderTimer = setTimeout(() => {
      this.renderTimer = null;
      const nearEnd = this.isNearEnd();
      for (const id of this.dirty) {
        const turn = this.model.turns.get(id);
        if (turn) this.view.renderTurn(turn);
      }
      this.dirty.clear();
      this.updateHeader();
      if (nearEnd) this.scrollToEnd();
    }, 16);
  }

  // -- actions -------------------------------------------------------------------------------

  async send() {
    const prompt = $("prompt");
    const content = prompt.value.trim();
    if (!content || !this.sessionId) return;
    $("send").disabled = true;
    try {
      // Queued when a turn runs: the queue's event shows it (see the top of this file).
      await this.api.send(this.sessionId, content);
      prompt.value = "";
      this.flash("");
    } catch (err) {
      if (err instanceof ApiError && err.code === "session_busy") {
        this.flash("a turn is still running: wait for it or interrupt it");
      } else {
        this.flash(`could not send: ${err.message}`);
      }
    } finally {
      $("send").disabled = false;
    }
  }

  async cancelQueued(messageId) {
    const queued = this.model.queued.find((q) => q.id === messageId);
    if (!queued || queued.cancelling || !this.sessionId) return;
    const generation = this.generation;
    queued.cancelling = true;
    this.queueView.render();
    try {
      await this.api.cancelQueued(this.sessionId, messageId);
      if (generation === this.generation) this.model.dequeue(messageId);
    } catch (err) {
      if (generation !== this.generation) return;
      if (err instanceof ApiError && err.status === 404) {
        // Not queued any more: it was cancelled, or its turn started (its event tells).
        this.model.dequeue(messageId);
      } else {
        queued.cancelling = false;
        this.flash(`could not cancel: ${err.message}`);
      }
    }
    this.queueView.render();
  }

  async interrupt() {
    if (!this.sessionId) return;
    $("interrupt").disabled = true;
    try {
      await this.api.interrupt(this.sessionId);
      this.flash("interrupting…");
    } catch (err) {
      this.flash(`could not interrupt: ${err.message}`);
      this.updateHeader();
    }
  }

  async decide(turnId, callId, requestId, decision) {
    const turn = this.model.turns.get(turnId);
    const call = turn && turn.calls.get(callId);
    const req = call && call.permission;
    if (!req || req.requestId !== requestId || req.answer) return;
    req.answer = decision;
    req.note = "sending…";
    this.view.renderTurn(turn);
    try {
      await this.api.decide(this.sessionId, requestId, decision);
      req.note = `answered: ${decision}`;
    } catch (err) {
      req.answer = err instanceof ApiError && err.status === 404 ? "gone" : null;
      req.note =
        req.answer === "gone" ? "this request was already answered or ended" : `could not answer: ${err.message}`;
    }
    this.view.renderTurn(turn);
  }

  // -- chrome --------------------------------------------------------------------------------

  updateHeader() {
    const s = this.model.session;
    const summary = this.sidebar.summary(this.sessionId);
    // A rename shows in the list's summary first (the snapshot is the older one then).
    const title = (summary && summary.title) || (s && s.title);
    $("session-title").textContent = this.sessionId ? title || "(untitled session)" : "drover";
    $("session-model").textContent = s ? s.model || "" : "";
    const running = Boolean(this.model.runningTurnId);
    $("session-state").textContent = this.sessionId ? (running ? "turn running" : "idle") : "";
    this.sidebar.markRunning();
    $("main").dataset.running = String(running);
    $("interrupt").disabled = !running;
    $("composer").hidden = !this.sessionId;
    let input = 0;
    let output = 0;
    for (const turn of this.model.turns.values()) {
      if (!turn.usage) continue;
      input += turn.usage.input;
      output += turn.usage.output;
    }
    $("session-usage").textContent = input || output ? `session: ${formatUsage({ input, output })}` : "";
    $("empty").hidden = Boolean(this.sessionId);
  }

  setConnection(state) {
    $("connection").textContent = state;
    $("connection").dataset.state = state;
  }

  flash(text) {
    $("flash").textContent = text;
  }

  isNearEnd() {
    const t = $("transcript");
    return t.scrollHeight - t.scrollTop - t.clientHeight < 80;
  }

  scrollToEnd() {
    const t = $("transcript");
    t.scrollTop = t.scrollHeight;
  }

  askToken(wasWrong) {
    const dialog = $("token-dialog");
    const form = $("token-form");
    const input = $("token-input");
    $("token-error").textContent = wasWrong ? "That token was refused; try again." : "";
    input.value = "";
    dialog.hidden = false;
    input.focus();
    return new Promise((resolve) => {
      const submit = (e) => {
        e.preventDefault();
        const token = input.value.trim();
        if (!token) return;
        form.removeEventListener("submit", submit);
        dialog.hidden = true;
        resolve(token);
      };
      form.addEventListener("submit", submit);
    });
  }
}

new App().start();
