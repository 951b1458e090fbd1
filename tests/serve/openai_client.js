// The OpenAI npm client (v4) against lql --serve over loopback: models, completions, chat
// with the ChatML template fixture (--chat-template), streaming with usage, and errors as
// the client's typed exceptions.
// usage: node openai_client.js LQL_BINARY WORK_DIR NPM_DIR. Bounded: the server is killed
// at the end, every request has a 60 s timeout (times LQL_TEST_SLOW, for an instrumented
// server). Prints "N passed, M failed".
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const [lql, work, npmDir] = process.argv.slice(2).map((p) => path.resolve(p));
let OpenAI;
try {
  OpenAI = require(path.join(npmDir, 'node_modules', 'openai'));
} catch (e) {
  console.log(`FAIL: the npm openai client is not in ${npmDir} (scripts/setup installs it)`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}
const root = path.resolve(__dirname, '..', '..');
const slow = Number(process.env.LQL_TEST_SLOW || '1');
let passed = 0, failed = 0;
const check = (ok, what) => { if (ok) passed++; else { failed++; console.log('FAIL:', what); } };

fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });
const cont = path.join(work, 'tiny.vindex3');
execFileSync(lql, ['-c', `EXTRACT MODEL "${root}/tests/fixtures/models/tinyllama" INTO "${cont}";`], { stdio: 'ignore' });
const srv = spawn(lql, [cont, '--serve', '127.0.0.1:0', '--chat-template', path.join(root, 'tests/fixtures/chatml.jinja')], { env: { ...process.env, TMPDIR: work } });
const killer = setTimeout(() => { srv.kill('SIGKILL'); process.exit(1); }, 240000 * slow);

srv.stderr.once('data', async (line) => {
  const port = Number(String(line).trim().split(':').pop());
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', timeout: 60000 * slow, maxRetries: 0 });
  try {
    const models = await client.models.list();
    const m = models.data[0];
    check(m.id === 'tinyllama' && m.layers === 4 && m.context === 256 && m.chat_template === 'ok',
          `models ${JSON.stringify(m)}`);

    const args = { model: m.id, prompt: 'The capital of France is', max_tokens: 10, temperature: 0 };
    const c = await client.completions.create(args);
    check(c.object === 'text_completion' && c.choices[0].text.startsWith(' Paris') &&
          c.usage.completion_tokens === 10 && c.choices[0].finish_reason === 'length',
          `completion ${JSON.stringify(c)}`);

    const stream = await client.completions.create({ ...args, stream: true, stream_options: { include_usage: true } });
    let text = '', usage = null, finish = null;
    for await (const chunk of stream) {
      if (chunk.choices.length) { text += chunk.choices[0].text; finish = chunk.choices[0].finish_reason || finish; }
      if (chunk.usage) usage = chunk.usage;
    }
    check(text === c.choices[0].text && finish === 'length' && usage && usage.completion_tokens === 10 &&
          usage.prompt_tokens === c.usage.prompt_tokens, `stream ${JSON.stringify(text)} usage ${JSON.stringify(usage)}`);

    const fails = async (req, status, param, Cls) => {
      try {
        await client.completions.create(req);
        check(false, `${JSON.stringify(req)} should fail`);
      } catch (e) {
        check(e instanceof Cls && e.status === status && (!param || e.param === param || (e.error && e.error.param === param)),
              `${JSON.stringify(req)}: ${e.constructor.name} ${e.status} ${e.message}`);
      }
    };
    await fails({ ...args, n: 2 }, 400, 'n', OpenAI.BadRequestError);
    await fails({ ...args, logit_bias: { 5: 1 } }, 400, 'logit_bias', OpenAI.BadRequestError);
    await fails({ ...args, max_tokens: 100000 }, 400, 'max_tokens', OpenAI.BadRequestError);
    await fails({ ...args, model: 'gpt-4' }, 404, 'model', OpenAI.NotFoundError);
    const chatArgs = { model: m.id, messages: [{ role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'The capital of France is' }], max_tokens: 8, temperature: 0 };
    const ch = await client.chat.completions.create(chatArgs);
    check(ch.object === 'chat.completion' && ch.choices[0].message.role === 'assistant' &&
          typeof ch.choices[0].message.content === 'string' && ch.usage.completion_tokens === 8,
          `chat ${JSON.stringify(ch)}`);
    const cs = await client.chat.completions.create({ ...chatArgs, stream: true, stream_options: { include_usage: true } });
    let ctext = '', cusage = null, role = null;
    for await (const chunk of cs) {
      if (chunk.choices.length) { ctext += chunk.choices[0].delta.content || ''; role = role || chunk.choices[0].delta.role; }
      if (chunk.usage) cusage = chunk.usage;
    }
    check(ctext === ch.choices[0].message.content && role === 'assistant' && cusage &&
          cusage.prompt_tokens === ch.usage.prompt_tokens, `chat stream ${JSON.stringify(ctext)}`);
    try {
      await client.chat.completions.create({ ...chatArgs, tools: [{ type: 'function', function: { name: 'f' } }] });
      check(false, 'tools should be refused');
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError && e.param === 'tools', `tools: ${e.message}`);
    }
  } catch (e) {
    check(false, `unexpected ${e.stack}`);
  }
  srv.kill('SIGTERM');
  srv.on('exit', (code) => {
    clearTimeout(killer);
    check(code === 0, `server exit ${code}`);
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
  });
});
