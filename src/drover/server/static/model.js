// The transcript as the page knows it: built from a snapshot (GET /v1/sessions/{id}) and kept
// current by the session's events, the same way whether an event is live or replayed.
//
// A turn holds its user message, its steps (one per model call: text, thinking and tool-use
// blocks in stream order), its tool calls keyed by id, its usage and its status. A step is
// "final" once its assistant message arrived; until then it is the live step that text deltas,
// new tool calls and the closing assistant message go to. No DOM here: the view reads this.
//
// The queue (`queued`) is the session's messages waiting for the running turn to end, in run
// order: the snapshot's `queued`, then `message_queued` adds one, `message_cancelled` and
// `message_started` (its turn begins) take one out.
//
// The workers of a `task` call hang under that call (`call.workers`, by worker index): their
// tool calls are stored with the scoped id `<task call id>/<worker>/<call id>` (in snapshots,
// and in permission requests), their other events arrive wrapped as `worker` events.

export const TERMINAL_STATES = new Set(["output-available", "output-error", "denied", "interrupted"]);

/** The events that change the queue and no turn. */
export const QUEUE_EVENTS = new Set(["message_queued", "message_cancelled", "message_started"]);

const STATUS_OF = { done: "completed", incomplete: "incomplete", error: "failed" };

const SCOPED_ID = /^(.+)\/(\d+)\/([^/]+)$/;

export class Transcript {
  constructor() {
    this.load(null);
  }

  /** Replace everything with a snapshot (null: an empty view). Returns all turn ids. */
  load(snapshot) {
    this.session = snapshot;
    this.turns = new Map();
    this.order = [];
    this.runningTurnId = snapshot ? snapshot.running_turn_id || null : null;
    this.lastId = snapshot ? Number(snapshot.last_event_id || 0) : 0;
    this.queued = [];
    for (const q of snapshot ? snapshot.queued || [] : []) this.enqueue(q.message_id, q.content);
    for (const raw of snapshot ? snapshot.turns || [] : []) {
      this.addTurn(turnFromSnapshot(raw));
    }
    for (const req of snapshot ? snapshot.pending_permissions || [] : []) {
      this.applyEvent({ type: "permission_request", ...req, turn_id: this.runningTurnId });
    }
    return this.order.slice();
  }

  addTurn(turn) {
    this.turns.set(turn.id, turn);
    this.order.push(turn.id);
    return turn;
  }

  currentTurn(turnId) {
    if (turnId && this.turns.has(turnId)) return this.turns.get(turnId);
    if (turnId) {
      return this.addTurn(newTurn({ id: turnId, status: "running" }));
    }
    const last = this.order[this.order.length - 1];
    return last ? this.turns.get(last) : null;
  }

  /** A queued message at the end of the queue (once: a replayed announcement adds nothing). */
  enqueue(id, content) {
    if (this.queued.some((q) => q.id === id)) return;
    this.queued.push({ id, content: content || "", cancelling: false });
  }

  /** Take a message out of the queue (cancelled, or its turn started); whether it was there. */
  dequeue(id) {
    const before = this.queued.length;
    this.queued = this.queued.filter((q) => q.id !== id);
    return this.queued.length !== before;
  }

  /** Apply one event; returns the id of the turn it changed, or null. */
  applyEvent(ev) {
    if (ev.type === "message_queued") {
      this.enqueue(ev.message_id, ev.content);
      return null;
    }
    if (ev.type === "message_cancelled" || ev.type === "message_started") {
      this.dequeue(ev.message_id);
      return null;
    }
    if (ev.type === "turns_rewound") {
      // Logged outside any turn: it names the turns a rewind undid.
      let changed = null;
      for (const id of ev.turn_ids || []) {
        const turn = this.turns.get(id);
        if (!turn) continue;
        turn.rewound = true;
        turn.discarded = true;
        changed = id;
      }
      return changed;
    }
    if (ev.type === "turn_started") {
      const turn = this.currentTurn(ev.turn_id);
      if (ev.user_message && turn.userText === null) turn.userText = messageText(ev.user_message);
      turn.status = "running";
      this.runningTurnId = turn.id;
      return turn.id;
    }
    const turn = this.currentTurn(ev.turn_id);
    if (!turn) return null;
    switch (ev.type) {
      case "step_started":
        stepNumbered(turn, ev.step);
        break;
      case "text_delta":
        appendText(turn, ev);
        break;
      case "retry":
        turn.notices.push(`retrying (attempt ${ev.attempt}): ${ev.error}`);
        if (ev.discard_partial) discardLiveText(turn);
        break;
      case "assistant_message":
        finishStep(turn, ev.message, Boolean(ev.partial));
        break;
      case "tool_state":
        updateCall(turn, ev);
        break;
      case "permission_request": {
        const call = ensureCall(turn, ev.call_id, ev.tool_name);
        if (!TERMINAL_STATES.has(call.state) && call.state !== "running") {
          call.state = "awaiting-permission";
          call.permission = {
            requestId: ev.request_id,
            summary: ev.summary || "",
            answer: null,
          };
        }
        break;
      }
      case "tool_results":
        for (const block of (ev.message && ev.message.content) || []) {
          if (block.type !== "tool_result") continue;
          const call = turn.calls.get(block.tool_use_id);
          if (call && call.output === null) {
            call.output = block.content;
            call.isError = Boolean(block.is_error);
          }
        }
        break;
      case "usage":
        // The turn's totals so far: the terminal event brings the final figures.
        turn.usage = { input: ev.total_input, output: ev.total_output, partial: true };
        break;
      case "worker":
        applyWorkerEvent(turn, ev);
        break;
      case "hook":
        if (ev.outcome !== "passed") {
          const said = (ev.message || "").trim().split("\n")[0];
          turn.notices.push(
            `${ev.point} hook (${ev.hook}) ${ev.outcome.replace("_", " ")} ${ev.name}` +
              (said ? `: ${said}` : ""),
          );
        }
        break;
      case "compacted":
        turn.notices.push(
          `conversation compacted: ${ev.messages_before} → ${ev.messages_after} messages`,
        );
        break;
      case "done":
      case "incomplete":
      case "error":
        turn.status = ev.reason === "interrupted" ? "interrupted" : STATUS_OF[ev.type];
        turn.reason = ev.type === "done" ? null : ev.reason || null;
        turn.error = ev.type === "done" ? null : ev.error || null;
        if (ev.usage) turn.usage = usageOf(ev.usage);
        for (const call of turn.calls.values()) call.permission = null;
        if (this.runningTurnId === turn.id) this.runningTurnId = null;
        break;
      default:
        return null; // tool_start, tool_done and unknown types change nothing shown
    }
    return turn.id;
  }

  /** Whether the next message resumes this turn's work: it ended unfinished, its work was
   * not dropped, and no turn after it has started since (a later turn that ran took the work
   * along; one that ended unfinished too keeps it pending with its own). */
  isPending(turn) {
    if (!["incomplete", "interrupted"].includes(turn.status) || turn.discarded) return false;
    for (let i = this.order.indexOf(turn.id) + 1; i < this.order.length; i += 1) {
      const later = this.turns.get(this.order[i]);
      if (later.status === "running" || later.status === "completed") return false;
    }
    return true;
  }

  /** What an unfinished turn keeps for the next message, as words ("" when nothing). */
  static pendingSummary(turn) {
    const messages = turn.steps.filter((s) => s.blocks.some((b) => b.type !== "tool")).length;
    const partial = turn.steps.filter((s) => !s.final || s.partial).length;
    const results = [...turn.calls.values()].filter(
      (c) => c.parentId === null && TERMINAL_STATES.has(c.state),
    ).length;
    const parts = [];
    if (messages) parts.push(plural(messages, "assistant message") + (partial ? ` (${partial} partial)` : ""));
    if (results) parts.push(plural(results, "tool result"));
    return parts.join(", ");
  }
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function newTurn({ id, status }) {
  return {
    id,
    seq: null,
    status,
    reason: null,
    error: null,
    userText: null,
    steps: [],
    calls: new Map(),
    usage: null,
    notices: [],
    createdAt: null,
    discarded: false,
    rewound: false,
  };
}

export function messageText(message) {
  return (message.content || [])
    .filter((b) => b.type === "text")
    .map((b) => b.text)
    .join("");
}

function usageOf(u) {
  return { input: u.input_tokens || 0, output: u.output_tokens || 0, partial: Boolean(u.partial) };
}

function newCall(id, name) {
  return {
    id,
    name: name || "tool",
    state: "input-streaming",
    input: null,
    output: null,
    isError: false,
    outcomeUnknown: false,
    permission: null,
    parentId: null, // set on a worker's call: the task call it runs under
    workers: new Map(), // on a task call: worker index → its prompt, status, text, calls
  };
}

/** The worker `index` of a task call, created on first sight. */
function workerOf(call, index) {
  let worker = call.workers.get(index);
  if (!worker) {
    worker = { index, status: null, prompt: null, text: "", liveText: "", callIds: [] };
    call.workers.set(index, worker);
    call.workers = new Map([...call.workers].sort((a, b) => a[0] - b[0]));
  }
  return worker;
}

/** Put `call` under its task call when its id is a worker's scoped id of a known call. */
function adoptWorkerCall(turn, call) {
  const scoped = SCOPED_ID.exec(call.id);
  const parent = scoped ? turn.calls.get(scoped[1]) : null;
  if (!parent || parent === call) return false;
  call.parentId = parent.id;
  const worker = workerOf(parent, Number(scoped[2]));
  if (!worker.callIds.includes(call.id)) worker.callIds.push(call.id);
  return true;
}

function applyWorkerEvent(turn, ev) {
  const parent = ensureCall(turn, ev.parent_call_id, "task");
  const worker = workerOf(parent, Number(ev.worker));
  const inner = ev.event || {};
  switch (inner.type) {
    case "turn_started":
      if (inner.user_message) worker.prompt = messageText(inner.user_message);
      worker.status = "running";
      break;
    case "step_started":
      worker.liveText = "";
      break;
    case "text_delta":
      worker.liveText += inner.text || "";
      break;
    case "retry":
      if (inner.discard_partial) worker.liveText = "";
      break;
    case "assistant_message": {
      const text = messageText(inner.message || {});
      if (text) worker.text = text;
      worker.liveText = "";
      break;
    }
    case "tool_state":
      updateCall(turn, { ...inner, call_id: `${parent.id}/${worker.index}/${inner.call_id}` });
      break;
    case "done":
    case "incomplete":
    case "error":
      worker.status = inner.reason === "interrupted" ? "interrupted" : STATUS_OF[inner.type];
      if (inner.type === "done" && inner.text) worker.text = inner.text;
      worker.liveText = "";
      break;
    default:
      break;
  }
}

function ensureCall(turn, id, name) {
  let call = turn.calls.get(id);
  if (!call) {
    call = newCall(id, name);
    turn.calls.set(id, call);
    if (!adoptWorkerCall(turn, call)) liveStep(turn).blocks.push({ type: "tool", callId: id });
  }
  return call;
}

function updateCall(turn, ev) {
  const call = ensureCall(turn, ev.call_id, ev.name);
  call.name = ev.name || call.name;
  call.state = ev.state;
  if (ev.input !== undefined && ev.input !== null) call.input = ev.input;
  if (ev.output !== undefined && ev.output !== null) call.output = ev.output;
  call.isError = Boolean(ev.is_error);
  call.outcomeUnknown = Boolean(ev.outcome_unknown);
  if (ev.state !== "awaiting-permission") call.permission = null;
}

function newStep(n) {
  return { n, blocks: [], final: false, partial: false };
}

/** The step new stream output goes to: the last one unless its message already arrived. */
function liveStep(turn) {
  const last = turn.steps[turn.steps.length - 1];
  if (last && !last.final) return last;
  const step = newStep(last ? last.n + 1 : 1);
  turn.steps.push(step);
  return step;
}

function stepNumbered(turn, n) {
  const found = turn.steps.find((s) => s.n === n);
  if (found) return found;
  const last = turn.steps[turn.steps.length - 1];
  if (last && !last.final && last.blocks.length === 0) {
    last.n = n;
    return last;
  }
  if (last && !last.final && last.n < n) last.final = true; // a step that ended with nothing
  const step = newStep(n);
  turn.steps.push(step);
  return step;
}

function appendText(turn, ev) {
  const step = ev.step ? stepNumbered(turn, ev.step) : liveStep(turn);
  if (step.final) return; // its message already replaced the deltas
  let block = step.blocks.find((b) => b.type === "text" && b.index === ev.index);
  if (!block) {
    // Text loaded from a snapshot carries no block index: the first delta of each index
    // claims the first unclaimed block (deltas arrive in block order).
    block = step.blocks.find((b) => b.type === "text" && b.index === undefined);
    if (block) block.index = ev.index;
  }
  if (!block) {
    block = { type: "text", text: "", partial: true, index: ev.index };
    step.blocks.push(block);
  }
  block.text += ev.text;
}

function discardLiveText(turn) {
  const step = turn.steps[turn.steps.length - 1];
  if (step && !step.final) step.blocks = step.blocks.filter((b) => b.type === "tool");
}

function blocksOf(message, partial) {
  const blocks = [];
  for (const b of message.content || []) {
    if (b.type === "text") blocks.push({ type: "text", text: b.text, partial: partial || Boolean(b.partial) });
    else if (b.type === "thinking") blocks.push({ type: "thinking", text: b.thinking || "" });
    else if (b.type === "tool_use") blocks.push({ type: "tool", callId: b.id, name: b.name, input: b.input });
  }
  return blocks;
}

function finishStep(turn, message, partial) {
  const step = liveStep(turn);
  const blocks = blocksOf(message, partial);
  const named = new Set(blocks.filter((b) => b.type === "tool").map((b) => b.callId));
  // Calls announced in the stream but absent from the message (cut off) stay shown.
  const loose = step.blocks.filter((b) => b.type === "tool" && !named.has(b.callId));
  for (const b of blocks) {
    if (b.type !== "tool") continue;
    const call = ensureCallQuiet(turn, b.callId, b.name);
    if (call.input === null) call.input = b.input;
  }
  step.blocks = blocks.map(({ type, text, partial: p, callId }) =>
    type === "tool" ? { type, callId } : { type, text, partial: p },
  ).concat(loose);
  step.final = true;
  step.partial = partial;
}

function ensureCallQuiet(turn, id, name) {
  let call = turn.calls.get(id);
  if (!call) {
    call = newCall(id, name);
    call.state = "input-available";
    turn.calls.set(id, call);
  }
  return call;
}

function turnFromSnapshot(raw) {
  const turn = newTurn({ id: raw.id, status: raw.status });
  turn.seq = raw.seq;
  turn.reason = raw.reason || null;
  turn.error = raw.error || null;
  turn.createdAt = raw.created_at || null;
  turn.discarded = Boolean(raw.discarded);
  turn.rewound = Boolean(raw.rewound);
  turn.userText = raw.user_message ? messageText(raw.user_message) : null;
  if (raw.usage) turn.usage = usageOf(raw.usage);
  for (const c of raw.tool_calls || []) {
    const call = newCall(c.call_id, c.name);
    call.state = c.state;
    call.input = c.input === undefined ? null : c.input;
    call.output = c.output === undefined ? null : c.output;
    call.isError = Boolean(c.is_error);
    call.outcomeUnknown = Boolean(c.outcome_unknown);
    call.step = c.step;
    turn.calls.set(call.id, call);
  }
  const placed = new Set();
  for (const entry of raw.messages || []) {
    const message = entry.message || entry;
    const partial = Boolean(entry.partial);
    if (message.role === "assistant") {
      const step = newStep(turn.steps.length + 1);
      step.blocks = blocksOf(message, partial).map((b) => {
        if (b.type !== "tool") return { type: b.type, text: b.text, partial: b.partial };
        placed.add(b.callId);
        const call = ensureCallQuiet(turn, b.callId, b.name);
        if (call.input === null) call.input = b.input;
        return { type: "tool", callId: b.callId };
      });
      // A message rebuilt from the deltas of a step still streaming is not final yet.
      step.final = !(partial && raw.status === "running");
      step.partial = partial;
      turn.steps.push(step);
    } else {
      for (const b of message.content || []) {
        const call = b.type === "tool_result" ? turn.calls.get(b.tool_use_id) : null;
        if (call && call.output === null) {
          call.output = b.content;
          call.isError = Boolean(b.is_error);
        }
      }
    }
  }
  // Calls that no message names (the stream broke after they were announced, or their
  // message is still streaming) go to the step that made them; a worker's, to its task call.
  for (const call of turn.calls.values()) {
    if (placed.has(call.id) || adoptWorkerCall(turn, call)) continue;
    let step = turn.steps.find((s) => s.n === call.step);
    if (!step) {
      step = newStep(call.step || turn.steps.length + 1);
      step.final = raw.status !== "running";
      turn.steps.push(step);
      turn.steps.sort((a, b) => a.n - b.n);
    }
    step.blocks.push({ type: "tool", callId: call.id });
  }
  return turn;
}
