// The diff a file-editing tool call shows, as the REPL shows it: `edit_file` as its old text
// turning into its new one (a line diff), `write_file` as the lines it writes. The page cannot
// read the file, so an edit is shown within the text it replaces, and a write as added lines.
// Built with textContent only: the model's text is never parsed as HTML, and what would act
// instead of showing (a bidi override, a zero-width character) is shown as an escape.

import { visible } from "./visible.js";

/** Longest inputs diffed line by line (the table is their product); beyond, all old lines
 * are shown removed, then all new ones added. */
const MAX_CELLS = 250_000;
/** Unchanged lines shown around a change; longer runs are folded. */
const CONTEXT = 3;

function splitLines(text) {
  if (text === "") return [];
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop(); // a final newline ends the last line
  return lines;
}

/** `[op, line]` pairs, op one of " " (kept), "-" (removed), "+" (added), in order. */
export function lineDiff(before, after) {
  const a = splitLines(before);
  const b = splitLines(after);
  if (a.length * b.length > MAX_CELLS) {
    return [...a.map((l) => ["-", l]), ...b.map((l) => ["+", l])];
  }
  // lcs[i][j]: the longest common subsequence of a[i:] and b[j:].
  const lcs = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i -= 1) {
    for (let j = b.length - 1; j >= 0; j -= 1) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      out.push([" ", a[i]]);
      i += 1;
      j += 1;
    } else if (i < a.length && (j === b.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push(["-", a[i]]);
      i += 1;
    } else {
      out.push(["+", b[j]]);
      j += 1;
    }
  }
  return out;
}

/** Keep CONTEXT kept lines around each change; a longer run becomes one ["…", count] entry. */
function folded(ops) {
  const near = ops.map(() => false);
  ops.forEach(([op], k) => {
    if (op === " ") return;
    for (let d = -CONTEXT; d <= CONTEXT; d += 1) if (ops[k + d]) near[k + d] = true;
  });
  const out = [];
  let skipped = 0;
  ops.forEach((entry, k) => {
    if (entry[0] !== " " || near[k]) {
      if (skipped) out.push(["…", skipped]);
      skipped = 0;
      out.push(entry);
    } else {
      skipped += 1;
    }
  });
  if (skipped) out.push(["…", skipped]);
  return out;
}

const CLASS = { "+": "diff-add", "-": "diff-del", " ": "diff-ctx", "…": "diff-skip" };

function el(tag, className, text) {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** What a file tool's input changes, as [header, ops]; null when the call is not one (or its
 * input has not arrived yet). */
export function fileChange(name, input) {
  if (!input || typeof input.path !== "string") return null;
  if (name === "edit_file" && typeof input.old_string === "string" && typeof input.new_string === "string") {
    const ops = lineDiff(input.old_string, input.new_string);
    const added = ops.filter(([op]) => op === "+").length;
    const removed = ops.filter(([op]) => op === "-").length;
    return [`${input.path}  −${removed} +${added}`, folded(ops)];
  }
  if (name === "write_file" && typeof input.content === "string") {
    const ops = lineDiff("", input.content);
    return [`${input.path}  (writes ${ops.length} line${ops.length === 1 ? "" : "s"})`, ops];
  }
  return null;
}

/** The element of a change from `fileChange`. */
export function renderChange([header, ops]) {
  const box = el("div", "tool-diff");
  const lines = el("pre", "diff-lines");
  for (const [op, line] of ops) {
    const text = op === "…" ? `… ${line} unchanged line${line === 1 ? "" : "s"}` : `${op} ${visible(line, { code: true })}`;
    lines.append(el("span", `diff-line ${CLASS[op]}`, text));
  }
  box.append(el("div", "diff-file", visible(header, { code: true })), lines);
  return box;
}
