// Drives a running `glm4 serve` with the official OpenAI client (tests/package.json pins it).
// Run by tests/test_serve.cpp: node openai_client.mjs functional|load, with GLM4_URL (.../v1),
// GLM4_KEY, GLM4_BASE (the base model's name), GLM4_ADAPTERS (a,b), GLM4_BUSY_URL (a server with
// one slot and no queue, for 429). Prints one JSON line of results; exits 1 on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};
const URL_ = env('GLM4_URL');
const KEY = env('GLM4_KEY');
const BASE = env('GLM4_BASE');
const ADAPTERS = env('GLM4_ADAPTERS').split(',');
const client = new OpenAI({ baseURL: URL_, apiKey: KEY, maxRetries: 0, timeout: 120_000 });
const results = {};

const ask = (content, extra = {}) => ({
  model: BASE,
  messages: [{ role: 'user', content }],
  max_tokens: 24,
  temperature: 0,
  ...extra,
});

async function collect(stream) {
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? c.text ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

// Expects `promise` to fail with an OpenAI APIError of `status` whose error names `param`.
async function rejects(promise, status, param, code) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    if (param !== undefined) assert.equal(e.param, param, e.message);
    if (code !== undefined) assert.equal(e.code, code, e.message);
    assert.equal(typeof e.error.message, 'string');
    assert.ok('type' in e.error && 'param' in e.error && 'code' in e.error);
    return e;
  }
  assert.fail(`expected HTTP ${status} (${param})`);
}

async function health() {
  return (await fetch(URL_.replace(/\/v1$/, '') + '/health')).json();
}

async function functional() {
  // Models: the base and every adapter by name.
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, [BASE, ...ADAPTERS]);
  assert.equal((await client.models.retrieve(ADAPTERS[0])).id, ADAPTERS[0]);
  await rejects(client.models.retrieve('no-such-model'), 404, 'model', 'model_not_found');

  // A chat completion, then the same streamed: the chunks concatenate to the same text.
  const question = 'What is the capital of France?';
  const whole = await client.chat.completions.create(ask(question));
  const reply = whole.choices[0].message.content;
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  assert.ok(whole.usage.prompt_tokens > 0 && whole.usage.completion_tokens > 0);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);
  const streamed = await collect(await client.chat.completions.create(
      ask(question, { stream: true, stream_options: { include_usage: true } })));
  assert.equal(streamed.text, reply);
  assert.equal(streamed.finish, whole.choices[0].finish_reason);
  assert.deepEqual(streamed.usage, whole.usage);
  results.chat = reply;

  // /v1/completions, whole and streamed.
  const prompt = 'The old king said';
  const comp = await client.completions.create({ model: BASE, prompt, max_tokens: 20, temperature: 0 });
  assert.equal(comp.object, 'text_completion');
  const compStream = await collect(await client.completions.create(
      { model: BASE, prompt, max_tokens: 20, temperature: 0, stream: true }));
  assert.equal(compStream.text, comp.choices[0].text);
  assert.equal(comp.usage.completion_tokens, 20);
  results.completion = comp.choices[0].text;

  // An adapter chosen by "model": a different reply from the base (the test compares it with
  // glm4 generate --adapter).
  const adapted = await client.chat.completions.create({ ...ask(question), model: ADAPTERS[0] });
  assert.equal(adapted.model, ADAPTERS[0]);
  assert.notEqual(adapted.choices[0].message.content, reply);
  results.adapter = adapted.choices[0].message.content;

  // Logprobs: one entry per token; at temperature 0 the token is its own most likely alternative.
  const lp = await client.chat.completions.create(ask(question, { logprobs: true, top_logprobs: 2 }));
  const content = lp.choices[0].logprobs.content;
  assert.equal(content.length, lp.usage.completion_tokens);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 2);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.ok(t.logprob <= 0);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
  }

  // A stop string: the reply ends right before it.
  const cut = reply.indexOf(' ', 3);
  if (cut > 0) {
    const stop = reply.slice(cut, cut + 3);
    const stopped = await client.chat.completions.create(ask(question, { stop: [stop] }));
    assert.equal(stopped.choices[0].message.content, reply.slice(0, reply.indexOf(stop)));
    assert.equal(stopped.choices[0].finish_reason, 'stop');
  }

  // Unknown fields are ignored; errors name their field.
  await client.chat.completions.create(ask(question, { max_tokens: 2, frobnicate: { x: 1 } }));
  await rejects(client.chat.completions.create(ask(question, { temperature: 'hot' })), 400, 'temperature');
  await rejects(client.chat.completions.create(ask(question, { temperature: 5 })), 400, 'temperature');
  await rejects(client.chat.completions.create(ask(question, { max_tokens: 0 })), 400, 'max_tokens');
  await rejects(client.chat.completions.create(ask(question, { max_tokens: 2.5 })), 400, 'max_tokens');
  await rejects(client.chat.completions.create(ask(question, { top_p: -1 })), 400, 'top_p');
  await rejects(client.chat.completions.create(ask(question, { stop: [1, 2] })), 400, 'stop');
  await rejects(client.chat.completions.create(ask(question, { n: 17 })), 400, 'n');
  const two = await client.chat.completions.create(ask(question, { n: 2, max_tokens: 4 }));
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  assert.equal(two.choices[0].message.content, two.choices[1].message.content);  // temperature 0
  // n = 2 streamed and sampled: the chunks of both choices interleave, each naming its index;
  // reassembled per index they are the whole answer's choices (the same seeds), one
  // finish_reason each, and the usage totals come once, last.
  const sampling = { n: 2, max_tokens: 10, temperature: 1, seed: 7 };
  const pair = await client.chat.completions.create(ask(question, sampling));
  const parts = [{ text: '', finish: [], role: 0 }, { text: '', finish: [], role: 0 }];
  let pairUsage = null;
  let usageChunks = 0;
  for await (const chunk of await client.chat.completions.create(
      ask(question, { ...sampling, stream: true, stream_options: { include_usage: true } }))) {
    if (chunk.usage) { pairUsage = chunk.usage; ++usageChunks; }
    for (const c of chunk.choices) {
      const p = parts[c.index];
      if (c.delta.role) ++p.role;
      p.text += c.delta.content ?? '';
      if (c.finish_reason) p.finish.push(c.finish_reason);
    }
  }
  for (const i of [0, 1]) {
    assert.equal(parts[i].role, 1);
    assert.equal(parts[i].text, pair.choices[i].message.content);
    assert.deepEqual(parts[i].finish, [pair.choices[i].finish_reason]);
  }
  assert.notEqual(parts[0].text, parts[1].text);  // two draws
  assert.equal(usageChunks, 1);
  assert.deepEqual(pairUsage, pair.usage);
  const comps = await client.completions.create({ model: BASE, prompt: 'The old king said', ...sampling });
  const compParts = ['', ''];
  for await (const chunk of await client.completions.create(
      { model: BASE, prompt: 'The old king said', ...sampling, stream: true })) {
    for (const c of chunk.choices) compParts[c.index] += c.text;
  }
  assert.deepEqual(compParts, comps.choices.map((c) => c.text));
  results.streamedChoices = parts.map((p) => p.text);
  await rejects(client.chat.completions.create(ask(question, { seed: 'x' })), 400, 'seed');
  await rejects(client.chat.completions.create(ask(question, { top_logprobs: 3 })), 400, 'top_logprobs');
  await rejects(client.chat.completions.create({ model: BASE, messages: [] }), 400, 'messages');
  await rejects(client.chat.completions.create({ model: BASE, messages: [{ role: 'wizard', content: 'x' }] }),
                400, 'messages[0].role');
  await rejects(client.completions.create({ model: BASE, prompt: 42 }), 400, 'prompt');
  await rejects(client.completions.create({ model: BASE, prompt: [999999] }), 400, 'prompt');
  await rejects(client.chat.completions.create({ ...ask(question), model: 'no-such-model' }), 404, 'model',
                'model_not_found');
  await rejects(client.chat.completions.create(ask('word '.repeat(3000))), 400, 'messages', 'context_length_exceeded');
  await rejects(client.chat.completions.create(ask('x'.repeat(1_500_000))), 413, null, 'request_too_large');
  await rejects(new OpenAI({ baseURL: URL_, apiKey: 'wrong', maxRetries: 0 }).models.list(), 401, null, 'invalid_api_key');
  const bare = await fetch(`${URL_}/chat/completions`, { method: 'POST', body: '{"model":' });
  assert.equal(bare.status, 401);  // no key: refused before the body is looked at
  const malformed = await fetch(`${URL_}/chat/completions`,
      { method: 'POST', body: '{"model": ', headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(malformed.status, 400);
  assert.equal((await malformed.json()).error.code, 'invalid_json');
  const notObject = await fetch(`${URL_}/completions`,
      { method: 'POST', body: '[1, 2]', headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(notObject.status, 400);

  // 8 concurrent greedy requests (mixed adapters and lengths) equal the same sent one at a time.
  const batch = [];
  for (let i = 0; i < 8; ++i) {
    const model = [BASE, ...ADAPTERS][i % (ADAPTERS.length + 1)];
    batch.push({ model, messages: [{ role: 'user', content: `Question ${i}: ${'tell me more '.repeat(i)}?` }],
                 max_tokens: 8 + 7 * i, temperature: 0 });
  }
  const one = async (r) => {
    const c = await client.chat.completions.create(r);
    return [c.choices[0].message.content, c.choices[0].finish_reason, c.usage.completion_tokens];
  };
  const sequential = [];
  for (const r of batch) sequential.push(await one(r));
  const concurrent = await Promise.all(batch.map(one));
  assert.deepEqual(concurrent, sequential);
  results.concurrent = concurrent.length;

  // A client that goes away mid-stream frees its slot.
  const longStream = await client.chat.completions.create(ask('Tell a long story.', { max_tokens: 1000, stream: true }));
  let chunks = 0;
  for await (const _ of longStream) {
    if (++chunks === 3) break;  // leaving the loop aborts the request
  }
  let h = await health();
  for (let i = 0; i < 200 && h.slots_busy > 0; ++i) {
    await new Promise((r) => setTimeout(r, 10));
    h = await health();
  }
  assert.equal(h.slots_busy, 0);

  // A server with one slot and no queue: concurrent requests beyond it get 429.
  const busy = new OpenAI({ baseURL: env('GLM4_BUSY_URL'), apiKey: 'unused', maxRetries: 0 });
  const outcomes = await Promise.allSettled(Array.from({ length: 4 }, () =>
      busy.chat.completions.create(ask('Tell a long story.', { max_tokens: 400 }))));
  const refused = outcomes.filter((o) => o.status === 'rejected');
  assert.ok(refused.length >= 1, 'no request was refused');
  assert.ok(outcomes.some((o) => o.status === 'fulfilled'), 'every request was refused');
  for (const o of refused) {
    assert.equal(o.reason.status, 429);
    assert.equal(o.reason.code, 'rate_limit_exceeded');
  }
}

// 64 requests from 16 concurrent clients (streamed and not, every model): all answered.
async function load() {
  const names = [BASE, ...ADAPTERS];
  let answered = 0;
  const worker = async (w) => {
    for (let k = 0; k < 4; ++k) {
      const i = w * 4 + k;
      const r = ask(`Request ${i}: ${'and then '.repeat(i % 7)}what?`,
                    { model: names[i % names.length], max_tokens: 16 + (i % 5) * 8 });
      if (i % 2) {
        const s = await collect(await client.chat.completions.create({ ...r, stream: true }));
        assert.ok(s.finish);
      } else {
        const c = await client.chat.completions.create(r);
        assert.ok(c.choices[0].finish_reason);
      }
      ++answered;
    }
  };
  await Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));
  assert.equal(answered, 64);
  results.answered = answered;
}

const phase = process.argv[2];
try {
  if (phase === 'functional') await functional();
  else if (phase === 'load') await load();
  else throw new Error(`unknown phase ${phase}`);
  console.log(JSON.stringify(results));
} catch (e) {
  console.error(e.stack || String(e));
  process.exit(1);
}
