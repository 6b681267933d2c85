// The openai SDK cancels a background response of drover's: a streamed background response
// is read until drover's tool call is under way, then client.responses.cancel(id); prints
// {"cancelled": the Response the cancel answered, "last": the stream's last event}.
// DROVER_URL and DROVER_TOKEN name the server.
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `${process.env.DROVER_URL}/v1`, apiKey: process.env.DROVER_TOKEN, maxRetries: 0 });
const stream = await client.responses.create({ model: 'drover', input: 'go', background: true, stream: true });
let id;
let cancelled;
let last;
for await (const event of stream) {
  if (event.type === 'response.created') id = event.response.id;
  if (event.type === 'response.mcp_call.in_progress') cancelled = await client.responses.cancel(id);
  last = event;
}
console.log(JSON.stringify({ cancelled, last }));
