// response_format against a running `glm4 serve` with the official OpenAI client: json_schema
// (streamed and not, n = 2) and json_object replies parse and follow the schema at temperature 1;
// a schema that cannot be compiled is a 400 naming the field. Run by
// tests/test_serve_response_format.cpp with GLM4_URL (.../v1) and GLM4_BASE; prints one JSON line
// of results and exits 1 on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: process.env.GLM4_URL,
  apiKey: 'none',
  maxRetries: 0,
  timeout: 120_000,
});
const BASE = process.env.GLM4_BASE;
const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 10 },
    age: { type: 'integer' },
    pet: { enum: ['cat', 'dog'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 2 },
  },
  required: ['age', 'name', 'pet', 'tags'],
  additionalProperties: false,
};
const person = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } };
const ask = (extra) => ({
  model: BASE,
  messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
  temperature: 1,
  max_tokens: 400,
  ...extra,
});

function check(text) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ['age', 'name', 'pet', 'tags']);
  assert.ok(Number.isInteger(v.age), text);
  assert.equal(typeof v.name, 'string', text);
  assert.ok(['cat', 'dog'].includes(v.pet), text);
  assert.ok(Array.isArray(v.tags) && v.tags.length <= 2, text);
  return v;
}

const results = { valid: 0, finished: 0 };
const seeds = [1, 2, 3, 4];
for (const seed of seeds) {
  const r = await client.chat.completions.create(ask({ seed, response_format: person }));
  const c = r.choices[0];
  if (c.finish_reason !== 'stop') continue;  // out of tokens inside a string or a number
  results.finished++;
  check(c.message.content);
  results.valid++;
}
assert.ok(results.finished >= 3, `only ${results.finished} of ${seeds.length} replies finished`);

let text = '';
let finish = null;
const stream = await client.chat.completions.create(
  ask({ seed: 5, response_format: person, stream: true }),
);
for await (const chunk of stream)
  for (const c of chunk.choices) {
    text += c.delta?.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
if (finish === 'stop') {
  check(text);
  results.streamed = true;
}

const two = await client.chat.completions.create(ask({ seed: 6, n: 2, response_format: person }));
assert.equal(two.choices.length, 2);
for (const c of two.choices) if (c.finish_reason === 'stop') check(c.message.content);

const obj = await client.chat.completions.create(
  ask({ seed: 7, response_format: { type: 'json_object' } }),
);
if (obj.choices[0].finish_reason === 'stop') {
  const v = JSON.parse(obj.choices[0].message.content);
  assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
  results.json_object = true;
}

try {
  await client.chat.completions.create(
    ask({
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'p', schema: { type: 'object', properties: { age: { type: 'string', pattern: '^a' } } } },
      },
    }),
  );
  assert.fail('a schema with "pattern" was accepted');
} catch (e) {
  assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
  assert.equal(e.status, 400);
  assert.equal(e.param, 'response_format.json_schema.schema');
  assert.match(e.message, /response_format\.json_schema\.schema\.properties\.age: "pattern" is not supported/);
  results.bad_schema = e.status;
}
console.log(JSON.stringify(results));
