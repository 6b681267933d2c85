// One turn of drover streamed through @ai-sdk/openai's Responses model (streamText), as its
// users write it; prints each stream part as a JSON line, then {"finishReason"}.
// DROVER_URL and DROVER_TOKEN name the server.
import { createOpenAI } from '@ai-sdk/openai';
import { streamText } from 'ai';

const openai = createOpenAI({ baseURL: `${process.env.DROVER_URL}/v1`, apiKey: process.env.DROVER_TOKEN });
const result = streamText({ model: openai.responses('drover'), prompt: 'Which files are here?' });
for await (const part of result.fullStream) console.log(JSON.stringify(part));
console.log(JSON.stringify({ finishReason: await result.finishReason }));
