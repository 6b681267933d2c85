// drover as the model of an OpenAI Agents SDK (JavaScript) agent: two turns, the second
// streamed. Run with a server up (`drover serve --token TOKEN`), @openai/agents and openai
// installed: DROVER_URL=http://127.0.0.1:8000 DROVER_TOKEN=TOKEN node responses_agents_sdk.mjs
import { Agent, OpenAIResponsesModel, run, setTracingDisabled, user } from '@openai/agents';
import OpenAI from 'openai';

setTracingDisabled(true); // (the SDK would send its traces to OpenAI's platform)
const client = new OpenAI({ baseURL: `${process.env.DROVER_URL}/v1`, apiKey: process.env.DROVER_TOKEN });
// No instructions and no tools: drover's agent has its own, and runs them on the server.
const agent = new Agent({ name: 'drover', model: new OpenAIResponsesModel(client, 'drover') });

const ran = items =>
  items
    .filter(item => item.type === 'tool_call_item') // a call drover ran (an mcp_call item)
    .forEach(item => console.log(`drover ran ${item.rawItem.providerData.name}`));

const first = await run(agent, 'Which files are here?');
ran(first.newItems);
console.log(first.finalOutput);

// The whole history goes back: drover finds its conversation by the answers' ids.
const second = await run(agent, [...first.history, user('What does it say?')], { stream: true });
for await (const text of second.toTextStream()) process.stdout.write(text);
await second.completed;
console.log();
ran(second.newItems);
