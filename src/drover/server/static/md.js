// A small, safe Markdown renderer for model output.
//
// Safety first: every piece of source text is HTML-escaped before any markup is added, so raw
// HTML from the model is shown as text, never parsed. Links keep only http(s) and mailto URLs.
// It covers what models write: fenced code (an unclosed fence renders as code, so a block still
// streaming looks right), headings, rules, quotes, lists, GitHub-style tables (a header row,
// a `---` row with optional `:` for alignment, body rows), paragraphs, and inline code, bold,
// italic, strikethrough and links. It is re-run on the whole text of a block as the text
// grows; unknown syntax degrades to plain text.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

// Inline markup of one line (or a paragraph's joined lines). Code spans and links are cut out
// first and put back at the end, so emphasis never reaches inside them.
function inline(source) {
  const held = [];
  const hold = (html) => `\u0000${held.push(html) - 1}\u0000`;
  let text = source.replace(/\u0000/g, "");
  text = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_m, _ticks, code) =>
    hold(`<code>${escapeHtml(code.trim() === "" ? code : code.replace(/^ (.*) $/s, "$1"))}</code>`),
  );
  text = text.replace(/\[([^\]\n]+)\]\(\s*([^()\s"'<>]+)\s*\)/g, (match, label, url) => {
    if (!SAFE_URL.test(url)) return hold(escapeHtml(label));
    const attrs = `href="${escapeHtml(url)}" target="_blank" rel="noopener noreferrer"`;
    return hold(`<a ${attrs}>${emphasis(escapeHtml(label))}</a>`);
  });
  text = text.replace(/<(https?:\/\/[^\s<>"']+)>/g, (_m, url) =>
    hold(`<a href="${escapeHtml(url)}" target="_blank" rel="noopener noreferrer">${escapeHtml(url)}</a>`),
  );
  text = emphasis(escapeHtml(text));
  return text.replace(/\u0000(\d+)\u0000/g, (_m, i) => held[Number(i)]);
}

function emphasis(html) {
  return html
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
    .replace(/(^|[^\w*])\*(?=[^\s*])([^*]*?[^\s*])\*(?![\w*])/g, "$1<em>$2</em>")
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>")
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const BULLET = /^( {0,3})([-*+])\s+(.*)$/;
const ORDERED = /^( {0,3})(\d{1,9})[.)]\s+(.*)$/;

const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

function isBlockStart(line) {
  return (
    FENCE.test(line) ||
    HEADING.test(line) ||
    RULE.test(line) ||
    QUOTE.test(line) ||
    BULLET.test(line) ||
    ORDERED.test(line)
  );
}

/** The cells of a table row: split at each `|` that is not escaped or inside a code span;
 * one leading and one trailing `|` are the row's edges. */
function cells(line) {
  const out = [];
  let cell = "";
  let ticks = 0; // the length of the backtick run opening the code span we are in (0: none)
  for (let i = 0; i < line.length; i += 1) {
    const c = line[i];
    if (c === "\\" && line[i + 1] === "|") {
      cell += "|";
      i += 1;
    } else if (c === "`") {
      let run = 1;
      while (line[i + run] === "`") run += 1;
      if (ticks === 0) ticks = run;
      else if (run === ticks) ticks = 0;
      cell += "`".repeat(run);
      i += run - 1;
    } else if (c === "|" && ticks === 0) {
      out.push(cell);
      cell = "";
    } else {
      cell += c;
    }
  }
  out.push(cell);
  if (out.length > 1 && out[0].trim() === "") out.shift();
  if (out.length > 1 && out[out.length - 1].trim() === "") out.pop();
  return out.map((c) => c.trim());
}

/** Whether a table starts at `lines[i]`: a row with a `|`, then a rule row of as many cells. */
function tableAt(lines, i) {
  return (
    i + 1 < lines.length &&
    lines[i].includes("|") &&
    TABLE_RULE.test(lines[i + 1]) &&
    lines[i + 1].includes("-") &&
    cells(lines[i]).length === cells(lines[i + 1]).length
  );
}

const ALIGN = { left: "", center: ' class="align-center"', right: ' class="align-right"' };

function alignment(rule) {
  const left = rule.startsWith(":");
  const right = rule.endsWith(":");
  return left && right ? "center" : right ? "right" : "left";
}

/** The table at `lines[i]` (see `tableAt`); returns [html, the index after it]. */
function renderTable(lines, i) {
  const head = cells(lines[i]);
  const aligns = cells(lines[i + 1]).map(alignment);
  const row = (values, tag) =>
    `<tr>${aligns.map((a, k) => `<${tag}${ALIGN[a]}>${inline(values[k] || "")}</${tag}>`).join("")}</tr>`;
  const body = [];
  let j = i + 2;
  while (j < lines.length && lines[j].trim() !== "" && lines[j].includes("|") && !isBlockStart(lines[j])) {
    body.push(row(cells(lines[j]), "td"));
    j += 1;
  }
  const tbody = body.length ? `<tbody>${body.join("")}</tbody>` : "";
  return [`<div class="table-wrap"><table><thead>${row(head, "th")}</thead>${tbody}</table></div>`, j];
}

function renderLines(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === "") {
      i += 1;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const marker = fence[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(marker)) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or the end of a block still streaming)
      const lang = fence[2] ? ` class="language-${escapeHtml(fence[2])}"` : "";
      out.push(`<pre><code${lang}>${escapeHtml(body.join("\n"))}</code></pre>`);
      continue;
    }
    if (tableAt(lines, i)) {
      const [html, next] = renderTable(lines, i);
      out.push(html);
      i = next;
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      const level = heading[1].length;
      out.push(`<h${level}>${inline(heading[2])}</h${level}>`);
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      out.push("<hr>");
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        body.push(QUOTE.exec(lines[i])[1]);
        i += 1;
      }
      out.push(`<blockquote>${renderLines(body)}</blockquote>`);
      continue;
    }
    const bullet = BULLET.exec(line);
    const ordered = bullet ? null : ORDERED.exec(line);
    if (bullet || ordered) {
      const pattern = bullet ? BULLET : ORDERED;
      const items = [];
      while (i < lines.length) {
        const m = pattern.exec(lines[i]);
        if (m) {
          items.push([m[3]]);
          i += 1;
        } else if (items.length && /^\s+\S/.test(lines[i]) && !isBlockStart(lines[i])) {
          items[items.length - 1].push(lines[i].trim());
          i += 1;
        } else if (
          items.length &&
          lines[i].trim() === "" &&
          i + 1 < lines.length &&
          pattern.test(lines[i + 1])
        ) {
          i += 1;
        } else {
          break;
        }
      }
      const tag = bullet ? "ul" : "ol";
      const start = ordered && ordered[2] !== "1" ? ` start="${Number(ordered[2])}"` : "";
      const lis = items.map((item) => `<li>${inline(item.join("\n"))}</li>`).join("");
      out.push(`<${tag}${start}>${lis}</${tag}>`);
      continue;
    }
    const para = [];
    while (
      i < lines.length &&
      lines[i].trim() !== "" &&
      !(para.length && (isBlockStart(lines[i]) || tableAt(lines, i)))
    ) {
      para.push(lines[i]);
      i += 1;
    }
    out.push(`<p>${inline(para.join("\n"))}</p>`);
  }
  return out.join("");
}

export function renderMarkdown(source) {
  return renderLines(String(source).replace(/\r\n?/g, "\n").split("\n"));
}
