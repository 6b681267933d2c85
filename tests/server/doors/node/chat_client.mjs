// A client of drover's /api/chat door built on the `ai` package itself (DefaultChatTransport,
// readUIMessageStream, AbstractChat — what useChat runs), driven by a test over stdin/stdout.
//
// The test writes one JSON command per line; the script answers with JSON lines:
//   {"op": "send", "url", "chat", "text", "headers"?, "drop_after"?}
//       POSTs a user message; "drop_after": N aborts the request after N chunks (a client that
//       drops mid-stream). Answers each chunk as {"event": "chunk", "chunk"}, then
//       {"event": "end", "how": "finished"|"dropped"|"error", "message", "error"?}.
//   {"op": "resume", "url", "chat", "headers"?}
//       GET /api/chat/{chat}/stream through the transport (reconnectToStream): {"event": "end",
//       "how": "none"} on 204, else chunks and the assembled message as above.
//   {"op": "approve", "url", "chat", "text", "approved"}
//       an AbstractChat (useChat's engine) sends the text, answers the first approval request
//       with addToolApprovalResponse and lets sendAutomaticallyWhen send it: {"event": "end",
//       "how": "finished", "messages", "status", "requests": [bodies it posted]}.
// The path of the installed packages' node_modules comes in DROVER_AI_SDK_MODULES.
import path from 'node:path';
import readline from 'node:readline';
import { pathToFileURL } from 'node:url';

const modules = process.env.DROVER_AI_SDK_MODULES;
const ai = await import(pathToFileURL(path.join(modules, 'ai', 'dist', 'index.js')).href);
const {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
} = ai;

const say = value => process.stdout.write(JSON.stringify(value) + '\n');

// Passes every chunk the transport parsed on to the test, counting them.
function tap(stream, onChunk) {
  return stream.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        onChunk(chunk);
        controller.enqueue(chunk);
      },
    }),
  );
}

async function assemble(stream, abort, dropAfter) {
  let count = 0;
  let message;
  const tapped = tap(stream, chunk => {
    count += 1;
    say({ event: 'chunk', chunk });
    if (dropAfter != null && count >= dropAfter) abort.abort();
  });
  let error;
  try {
    for await (const snapshot of readUIMessageStream({
      stream: tapped,
      terminateOnError: true,
    })) {
      message = snapshot;
    }
  } catch (err) {
    error = err;
  }
  if (abort.signal.aborted) return { how: 'dropped', message };
  if (error) return { how: 'error', message, error: String(error && error.message) };
  return { how: 'finished', message };
}

async function send(command) {
  const transport = new DefaultChatTransport({
    api: `${command.url}/api/chat`,
    headers: command.headers,
  });
  const abort = new AbortController();
  const user = { id: `u-${Date.now()}`, role: 'user', parts: [{ type: 'text', text: command.text }] };
  let stream;
  try {
    stream = await transport.sendMessages({
      chatId: command.chat,
      messages: [...(command.history ?? []), user],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: abort.signal,
    });
  } catch (err) {
    return { how: 'refused', status: err.statusCode, error: String(err.message) };
  }
  return assemble(stream, abort, command.drop_after);
}

async function resume(command) {
  const transport = new DefaultChatTransport({
    api: `${command.url}/api/chat`,
    headers: command.headers,
  });
  const abort = new AbortController();
  const stream = await transport.reconnectToStream({
    chatId: command.chat,
    abortSignal: abort.signal,
  });
  if (stream == null) return { how: 'none' };
  if (!transport.resumeStreamIsReplay) throw new Error('expected a replaying transport');
  // A replay from the start: the message is assembled anew, as useChat does on resume.
  return assemble(stream, abort, command.drop_after);
}

class State {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage = message => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  };
  snapshot = value => structuredClone(value);
}

class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new State() });
  }
}

async function approve(command) {
  const requests = [];
  const recording = async (url, init) => {
    if (init?.body) requests.push(JSON.parse(init.body));
    return fetch(url, init);
  };
  let finished;
  const chat = new Chat({
    id: command.chat,
    transport: new DefaultChatTransport({ api: `${command.url}/api/chat`, fetch: recording }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: options => {
      finished = options;
    },
  });
  await chat.sendMessage({ text: command.text });
  const asked = chat.messages
    .flatMap(m => m.parts)
    .find(p => p.state === 'approval-requested');
  if (asked == null) {
    return { how: 'no-approval', messages: chat.messages, status: chat.status, requests };
  }
  say({ event: 'asked', part: asked });
  finished = undefined;
  await chat.addToolApprovalResponse({ id: asked.approval.id, approved: command.approved });
  // The automatic send runs on its own; wait for the response it starts to finish.
  while (finished == null || chat.status !== 'ready') {
    await new Promise(resolve => setTimeout(resolve, 10));
  }
  return {
    how: 'finished',
    messages: chat.messages,
    status: chat.status,
    error: chat.error ? String(chat.error.message) : null,
    requests,
  };
}

const ops = { send, resume, approve };
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  try {
    say({ event: 'end', ...(await ops[command.op](command)) });
  } catch (err) {
    say({ event: 'end', how: 'crash', error: String(err && err.stack) });
  }
}
