// Text from a model, a tool or a server, made safe to show: the characters that would act
// instead of showing become escapes, as the terminal shows them (drover/visible.py, the same
// rule). In a page that is what reorders or hides text: a right-to-left override (U+202E)
// shows `ls -la #hs | lruc` for a command ending in `curl | sh`, zero-width characters make two
// commands look alike, C1 controls and the line separators render as nothing. Nothing is
// dropped: what is shown is never less than what runs.

const NAMED = { "\r": "\\r", "\x1b": "\\x1b" };
// C0 controls but tab and newline, DEL and C1; directional formatting; line separators.
const PROSE = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/gu;
// Every invisible format character (Unicode "Cf"): in commands, paths, file contents, input.
const FORMAT = /\p{Cf}/gu;

function escape(char) {
  if (NAMED[char]) return NAMED[char];
  const code = char.codePointAt(0);
  const hex = code.toString(16);
  if (code < 0x100) return `\\x${hex.padStart(2, "0")}`;
  return code < 0x10000 ? `\\u${hex.padStart(4, "0")}` : `\\U${hex.padStart(8, "0")}`;
}

/** `text` with every character that acts instead of showing made an escape; `code` for
 * commands, paths, file contents and tool input (zero-width characters too). */
export function visible(text, { code = false } = {}) {
  const shown = text.replace(PROSE, escape);
  return code ? shown.replace(FORMAT, escape) : shown;
}
