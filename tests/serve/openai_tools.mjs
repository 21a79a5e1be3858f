// Tools and reasoning through the official OpenAI client (tests/package.json pins it), run by
// tests/test_cli_serve_tools.cpp: node openai_tools.mjs tools|arguments|pairs|reasoning, with GLM4_URL (.../v1) and
// GLM4_BASE (the served model's name). Prints one JSON line of results; exits 1 on a failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const URL_ = process.env.GLM4_URL;
const BASE = process.env.GLM4_BASE;
const client = new OpenAI({ baseURL: URL_, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
const results = {};

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather of a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const ask = (messages, extra = {}) => ({
  model: BASE,
  messages,
  max_tokens: 12,
  temperature: 0,
  ...extra,
});

// A stream's deltas put together as OpenAI's own helpers do.
async function collect(stream) {
  const out = { content: '', reasoning: '', calls: [], finish: null, chunks: 0, firsts: [] };
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      out.chunks += 1;
      out.content += c.delta?.content ?? '';
      out.reasoning += c.delta?.reasoning_content ?? '';
      for (const t of c.delta?.tool_calls ?? []) {
        if (!out.calls[t.index]) {
          // The first delta of a call carries its id, type and name.
          assert.ok(t.id?.startsWith('call_'), JSON.stringify(t));
          assert.equal(t.type, 'function');
          assert.equal(typeof t.function.name, 'string');
          out.firsts.push(t.index);
          out.calls[t.index] = { id: t.id, name: t.function.name, arguments: '' };
        } else {
          assert.equal(t.id, undefined, 'only the first delta names the call');
        }
        out.calls[t.index].arguments += t.function?.arguments ?? '';
      }
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

async function rejects(promise, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, 400, e.message);
    assert.equal(e.param, param, e.message);
    return;
  }
  assert.fail(`expected HTTP 400 (${param})`);
}

async function tools() {
  const user = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const forced = { tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } } };
  // Not streamed: the call the prompt opened, with an id and its arguments as a string.
  const whole = await client.chat.completions.create(ask(user, forced));
  const msg = whole.choices[0].message;
  assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg));
  const call = msg.tool_calls[0];
  assert.ok(call.id.startsWith('call_'));
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.equal(typeof call.function.arguments, 'string');
  assert.ok(['tool_calls', 'length'].includes(whole.choices[0].finish_reason));
  // Streamed: the same call, its name first, its arguments in pieces that add up to the same.
  const streamed = await collect(await client.chat.completions.create(ask(user, { ...forced, stream: true })));
  assert.deepEqual(streamed.firsts, [0]);
  assert.equal(streamed.calls[0].name, 'get_weather');
  assert.equal(streamed.calls[0].arguments, call.function.arguments);
  assert.equal(streamed.finish, whole.choices[0].finish_reason);
  // The round trip: the call and its result go back; the model answers.
  const back = [
    ...user,
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
  ];
  const answer = await client.chat.completions.create(ask(back, { tools: [weather], tool_choice: 'none' }));
  assert.equal(answer.choices[0].message.tool_calls, undefined);
  assert.equal(typeof answer.choices[0].message.content, 'string');
  const answerStream = await collect(
    await client.chat.completions.create(ask(back, { tools: [weather], tool_choice: 'none', stream: true })),
  );
  assert.equal(answerStream.content, answer.choices[0].message.content);
  assert.equal(answerStream.calls.length, 0);
  // Errors name the field.
  await rejects(client.chat.completions.create(ask(user, { tools: [{ type: 'code' }] })), 'tools[0].type');
  await rejects(
    client.chat.completions.create(ask(user, { tools: [{ type: 'function', function: { name: 'a b' } }] })),
    'tools[0].function.name',
  );
  await rejects(
    client.chat.completions.create(ask(user, { tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } })),
    'tool_choice.function.name',
  );
  await rejects(client.chat.completions.create(ask(user, { tools: [weather], tool_choice: 'always' })), 'tool_choice');
  await rejects(client.chat.completions.create(ask(user, { tool_choice: 'required' })), 'tool_choice');
  await rejects(
    client.chat.completions.create(
      ask([...user, { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: 1 } }] }]),
    ),
    'messages[1].tool_calls[0].function.arguments',
  );
  results.arguments = call.function.arguments;
  results.answer = answer.choices[0].message.content;
}

// A forced call's arguments follow the tool's parameters schema (constrained decoding): they
// JSON-parse, have the required keys and the declared types, streamed and not.
const forecast = {
  type: 'function',
  function: {
    name: 'get_forecast',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', enum: [1, 2, 3] }, hourly: { type: 'boolean' } },
      required: ['city', 'days'],
    },
  },
};
const clock = {
  type: 'function',
  function: {
    name: 'get_time',
    parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['utc', 'cet'] } }, required: ['zone'] },
  },
};
const calendar = {
  type: 'function',
  function: {
    name: 'get_date',
    parameters: { type: 'object', properties: { offset: { type: 'integer', enum: [0, 1] } }, required: ['offset'] },
  },
};

// The arguments JSON-parse and follow the tool's schema: required keys, no others, the types,
// enums and maxLength declared.
function checkArguments(tools, name, text) {
  const tool = tools.find((t) => t.function.name === name);
  assert.ok(tool, `a call to ${name}, not one of the tools`);
  const { properties, required } = tool.function.parameters;
  const args = JSON.parse(text);
  assert.ok(typeof args === 'object' && args !== null && !Array.isArray(args), text);
  for (const k of required) assert.ok(k in args, `${k} missing in ${text}`);
  for (const [k, v] of Object.entries(args)) {
    const p = properties[k];
    assert.ok(p, `unknown key ${k} in ${text}`);
    assert.equal(typeof v, p.type === 'integer' ? 'number' : p.type, text);
    if (p.type === 'integer') assert.ok(Number.isInteger(v), text);
    if (p.enum) assert.ok(p.enum.includes(v), text);
    if (p.maxLength) assert.ok(v.length <= p.maxLength, text);
  }
  return args;
}

const namedForecast = { type: 'function', function: { name: 'get_forecast' } };

// GLM-4: a named tool, required with one and with two tools. GLM-4.5 family (pairs): a named
// tool and required with one (the name left open), arguments as <arg_key> / <arg_value> pairs.
async function argumentsPhase(pairs) {
  const user = [{ role: 'user', content: 'Weather in Paris for two days?' }];
  const seen = [];
  const cases = pairs
    ? [
        [[forecast], namedForecast],
        [[forecast, clock], 'required'],
      ]
    : [
        [[clock, forecast], namedForecast],
        [[forecast], 'required'],
        [[clock, calendar], 'required'],
      ];
  for (const [tools, choice] of cases) {
    for (const seed of [1, 2]) {
      const body = ask(user, { tools, tool_choice: choice, max_tokens: 160, temperature: 1, seed });
      const whole = await client.chat.completions.create(body);
      const msg = whole.choices[0].message;
      assert.equal(whole.choices[0].finish_reason, 'tool_calls', JSON.stringify(msg));
      assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg));
      const call = msg.tool_calls[0].function;
      if (typeof choice === 'object') assert.equal(call.name, 'get_forecast');
      checkArguments(tools, call.name, call.arguments);
      const streamed = await collect(await client.chat.completions.create({ ...body, stream: true }));
      assert.equal(streamed.finish, 'tool_calls');
      assert.equal(streamed.calls.length, 1);
      assert.equal(streamed.calls[0].name, call.name);
      assert.equal(streamed.calls[0].arguments, call.arguments);
      seen.push({ name: call.name, arguments: call.arguments });
    }
  }
  results.calls = seen;
}

async function reasoning() {
  const user = [{ role: 'user', content: 'Is 91 prime?' }];
  // GLM-4.7's prompt ends inside <think>: what the model writes until </think> is reasoning.
  const whole = await client.chat.completions.create(ask(user));
  const msg = whole.choices[0].message;
  assert.equal(typeof msg.reasoning_content, 'string', JSON.stringify(msg));
  assert.ok(msg.reasoning_content.length > 0);
  const streamed = await collect(await client.chat.completions.create(ask(user, { stream: true })));
  assert.equal(streamed.reasoning, msg.reasoning_content);
  assert.equal(streamed.content, msg.content ?? '');
  // Thinking off: no reasoning, the same kind of text is the answer.
  const off = await client.chat.completions.create(
    ask(user, { chat_template_kwargs: { enable_thinking: false } }),
  );
  assert.equal(off.choices[0].message.reasoning_content, undefined);
  assert.ok(off.choices[0].message.content.length > 0);
  results.reasoning = msg.reasoning_content;
  results.content = msg.content;
}

const phase = process.argv[2];
try {
  if (phase === 'tools') await tools();
  else if (phase === 'reasoning') await reasoning();
  else if (phase === 'arguments') await argumentsPhase(false);
  else if (phase === 'pairs') await argumentsPhase(true);
  else throw new Error(`unknown phase ${phase}`);
  console.log(JSON.stringify(results));
} catch (e) {
  console.error(e);
  process.exit(1);
}
