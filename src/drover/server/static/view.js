// The transcript's DOM: one <section class="turn"> per turn, one <div class="step"> per model
// call, text blocks rendered as Markdown, tool calls as cards showing their live state (file
// edits as diffs, diff.js); and the queue under it, one <li class="queued"> per waiting message.
//
// Rendering is keyed: a turn, step, text block or card keeps its element across updates, and
// only what changed is rewritten, so a block that streams is re-rendered alone and a button
// being clicked is never replaced under the pointer. Data attributes (data-turn-id,
// data-status, data-call-id, data-state) describe the state for styling and for tests.

import { fileChange, renderChange } from "./diff.js";
import { renderMarkdown } from "./md.js";
import { Transcript, TERMINAL_STATES } from "./model.js";
import { visible } from "./visible.js";

const STATUS_TEXT = {
  running: "running…",
  completed: "completed",
  incomplete: "incomplete",
  interrupted: "interrupted",
  failed: "failed",
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function reorder(parent, children) {
  children.forEach((child, i) => {
    if (parent.children[i] !== child) parent.insertBefore(child, parent.children[i] || null);
  });
  while (parent.children.length > children.length) parent.lastElementChild.remove();
}

export function formatUsage(usage) {
  if (!usage) return "";
  const approx = usage.partial ? " (so far)" : "";
  return `${usage.input} in · ${usage.output} out tokens${approx}`;
}

export class TranscriptView {
  /** Draws `model` (a Transcript) into `root`; `onDecision(turnId, callId, requestId,
   * decision)` answers a permission prompt. */
  constructor(root, model, onDecision) {
    this.root = root;
    this.model = model;
    this.onDecision = onDecision;
    this.clear();
  }

  clear() {
    this.root.replaceChildren();
    this.turnEls = new Map();
    this.cards = new Map();
    this.stepEls = new WeakMap();
    this.blockEls = new WeakMap();
    this.workerEls = new Map();
  }

  /** Draw every turn of the model (after a snapshot). */
  renderAll() {
    this.clear();
    for (const id of this.model.order) this.renderTurn(this.model.turns.get(id));
  }

  renderTurn(turn) {
    let parts = this.turnEls.get(turn.id);
    if (!parts) {
      const section = el("section", "turn");
      section.dataset.turnId = turn.id;
      parts = {
        section,
        user: el("div", "user-message"),
        steps: el("div", "steps"),
        notices: el("ul", "notices"),
        footer: el("footer", "turn-footer"),
      };
      section.append(parts.user, parts.steps, parts.notices, parts.footer);
      this.turnEls.set(turn.id, parts);
      this.root.append(section);
    }
    parts.section.dataset.status = turn.status;
    parts.section.dataset.rewound = turn.rewound ? "true" : "false";
    parts.user.hidden = turn.userText === null;
    if (turn.userText !== null && parts.user.textContent !== turn.userText) {
      parts.user.textContent = turn.userText;
    }
    reorder(
      parts.steps,
      turn.steps.map((step) => this.renderStep(turn, step)),
    );
    if (parts.notices.children.length !== turn.notices.length) {
      parts.notices.replaceChildren(...turn.notices.map((n) => el("li", "notice", n)));
    }
    this.renderFooter(turn, parts.footer);
    return parts.section;
  }

  renderStep(turn, step) {
    let node = this.stepEls.get(step);
    if (!node) {
      node = el("div", "step");
      this.stepEls.set(step, node);
    }
    node.dataset.step = String(step.n);
    node.classList.toggle("streaming", !step.final && turn.status === "running");
    reorder(
      node,
      step.blocks.map((block) => this.renderBlock(turn, block)),
    );
    return node;
  }

  renderBlock(turn, block) {
    if (block.type === "tool") return this.renderCard(turn, turn.calls.get(block.callId) || null, block.callId);
    let node = this.blockEls.get(block);
    if (!node) {
      node = block.type === "thinking" ? el("details", "block thinking") : el("div", "block text markdown");
      this.blockEls.set(block, node);
    }
    if (node.renderedSource !== block.text) {
      node.renderedSource = block.text;
      if (block.type === "thinking") {
        node.replaceChildren(el("summary", null, "thinking"), el("pre", null, block.text));
      } else {
        // Escaped before any markup is added: see md.js.
        node.innerHTML = renderMarkdown(block.text);
      }
    }
    if (block.type === "text") node.dataset.partial = String(Boolean(block.partial));
    return node;
  }

  renderCard(turn, call, callId) {
    let card = this.cards.get(callId);
    if (!card) {
      card = el("div", "tool-card");
      card.dataset.callId = callId;
      card.parts = {
        name: el("span", "tool-name"),
        state: el("span", "tool-state"),
        unknown: el("span", "outcome-unknown", "outcome unknown"),
        input: el("pre", "tool-input"),
        diff: el("div", "tool-change"),
        permission: el("div", "permission"),
        output: el("pre", "tool-output"),
        workers: el("div", "workers"),
      };
      const head = el("div", "tool-head");
      head.append(card.parts.name, card.parts.state, card.parts.unknown);
      card.append(
        head,
        card.parts.input,
        card.parts.diff,
        card.parts.permission,
        card.parts.output,
        card.parts.workers,
      );
      this.cards.set(callId, card);
    }
    const p = card.parts;
    if (!call) return card;
    card.dataset.state = call.state;
    card.classList.toggle("terminal", TERMINAL_STATES.has(call.state));
    card.classList.toggle("error", call.isError);
    p.name.textContent = visible(call.name, { code: true });
    p.state.textContent = call.state;
    p.unknown.hidden = !call.outcomeUnknown;
    card.dataset.outcomeUnknown = String(call.outcomeUnknown);
    // What the model wrote, shown as it is: controls, bidi overrides and zero-width characters
    // as escapes (visible.js); a card that asks shows all of it, wrapped (style.css).
    const input = call.input === null ? "" : visible(JSON.stringify(call.input, null, 2), { code: true });
    if (p.input.textContent !== input) p.input.textContent = input;
    // A file edit shows as a diff (as the REPL asks with one), its raw input hidden.
    if (p.diff.renderedSource !== input) {
      p.diff.renderedSource = input;
      const change = fileChange(call.name, call.input);
      p.diff.replaceChildren(...(change ? [renderChange(change)] : []));
    }
    p.diff.hidden = p.diff.children.length === 0;
    p.input.hidden = input === "" || !p.diff.hidden;
    const output = call.output === null ? "" : visible(call.output);
    if (p.output.textContent !== output) p.output.textContent = output;
    p.output.hidden = call.output === null;
    this.renderPermission(turn, call, p.permission);
    const workers = [...call.workers.values()].map((w) => this.renderWorker(turn, call, w));
    reorder(p.workers, workers);
    p.workers.hidden = workers.length === 0;
    return card;
  }

  /** A worker of a task call: its prompt, status, tool calls (as cards) and latest text. */
  renderWorker(turn, call, worker) {
    const key = `${call.id}/${worker.index}`;
    let node = this.workerEls.get(key);
    if (!node) {
      node = el("div", "worker");
      node.dataset.worker = String(worker.index);
      node.parts = {
        title: el("span", "worker-title", `worker ${worker.index}`),
        status: el("span", "worker-status"),
        prompt: el("p", "worker-prompt"),
        calls: el("div", "worker-calls"),
        text: el("div", "worker-text markdown"),
      };
      const head = el("div", "worker-head");
      head.append(node.parts.title, node.parts.status);
      node.append(head, node.parts.prompt, node.parts.calls, node.parts.text);
      this.workerEls.set(key, node);
    }
    const p = node.parts;
    node.dataset.status = worker.status || "";
    p.status.textContent = worker.status ? STATUS_TEXT[worker.status] || worker.status : "";
    p.prompt.textContent = worker.prompt || "";
    p.prompt.hidden = !worker.prompt;
    reorder(
      p.calls,
      worker.callIds.map((id) => this.renderCard(turn, turn.calls.get(id) || null, id)),
    );
    const text = worker.liveText || worker.text;
    if (p.text.renderedSource !== text) {
      p.text.renderedSource = text;
      p.text.innerHTML = renderMarkdown(text); // escaped before any markup: see md.js
    }
    p.text.hidden = text === "";
    return node;
  }

  renderPermission(turn, call, box) {
    const req = call.permission;
    if (!req) {
      box.hidden = true;
      if (box.children.length) box.replaceChildren();
      delete box.dataset.requestId;
      return;
    }
    box.hidden = false;
    if (box.dataset.requestId !== req.requestId) {
      box.dataset.requestId = req.requestId;
      const asked = visible(`Allow ${call.name}? ${req.summary}`, { code: true });
      const question = el("p", "permission-question", asked);
      const buttons = el("div", "permission-buttons");
      for (const [decision, label] of [
        ["allow", "Allow"],
        ["always", "Always allow"],
        ["deny", "Deny"],
      ]) {
        const button = el("button", `decide decide-${decision}`, label);
        button.type = "button";
        button.dataset.decision = decision;
        button.addEventListener("click", () =>
          this.onDecision(turn.id, call.id, req.requestId, decision),
        );
        buttons.append(button);
      }
      box.replaceChildren(question, buttons, el("p", "permission-note"));
    }
    for (const button of box.querySelectorAll("button")) button.disabled = req.answer !== null;
    box.querySelector(".permission-note").textContent = req.note || "";
  }

  renderFooter(turn, footer) {
    const badge = el("span", `status-badge status-${turn.status}`, STATUS_TEXT[turn.status] || turn.status);
    const items = [badge];
    if (turn.rewound) items.push(el("span", "status-badge status-rewound", "rewound"));
    if (turn.status !== "running" && turn.status !== "completed") {
      const why = turn.error || turn.reason;
      if (why) items.push(el("span", "turn-error", why));
      const pending = Transcript.pendingSummary(turn);
      if (pending && this.model.isPending(turn)) {
        items.push(el("span", "turn-pending", `pending: ${pending} — the next message resumes it`));
      }
    }
    if (turn.usage) items.push(el("span", "turn-usage", formatUsage(turn.usage)));
    footer.replaceChildren(...items);
  }
}

/** The messages waiting for the running turn to end: each one's text (as text: it is the
 * user's input, never markup) and a control that cancels it (`onCancel(messageId)`). Keyed by
 * message id, like the transcript, so a button is never replaced under the pointer. */
export class QueueView {
  constructor(root, list, model, onCancel) {
    this.root = root;
    this.list = list;
    this.model = model;
    this.onCancel = onCancel;
    this.items = new Map();
  }

  render() {
    const items = this.model.queued.map((q) => this.renderItem(q));
    const shown = new Set(this.model.queued.map((q) => q.id));
    for (const id of this.items.keys()) if (!shown.has(id)) this.items.delete(id);
    reorder(this.list, items);
    this.root.hidden = items.length === 0;
  }

  renderItem(queued) {
    let item = this.items.get(queued.id);
    if (!item) {
      item = el("li", "queued");
      item.dataset.messageId = queued.id;
      const cancel = el("button", "queued-cancel", "Cancel");
      cancel.type = "button";
      cancel.title = "Cancel this queued message";
      cancel.addEventListener("click", () => this.onCancel(queued.id));
      item.append(el("span", "queued-content", queued.content), cancel);
      this.items.set(queued.id, item);
    }
    item.querySelector(".queued-cancel").disabled = queued.cancelling;
    return item;
  }
}
