// The app's side of scripts/bench-app-vs-api.sh: starts the real app (window
// open under Xvfb, fresh data folder, the built-in default model), turns on
// its local OpenAI-compatible server, then for the same prompt, greedily,
// ROUNDS times each:
//   window: time from clicking Send to the first answer text in the chat
//           (measured inside the page), and the streaming rate (the stored
//           reply's token count over the time from first text to the end);
//   api:    the same through the app's own server (a streamed
//           /v1/chat/completions): time to the first content delta, and the
//           rate from the first delta to the last;
// and the web view process's CPU over IDLE_S seconds, idle on the chat page.
// Prints one line per measurement; never asserts (timings are not tests).
// Usage: node scripts/bench/app_vs_api.mjs ROUNDS MAX_TOKENS IDLE_S PROMPT   (needs DISPLAY and tauri-driver)
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import {
  allByTestId, appPids, byTestId, modelReady, openApp, openPage, saveSettings, startDriver, stopDriver,
  tempFolder, textOf, waitFor,
} from '../../ui/e2e/harness.mjs';

const [rounds, maxTokens, idleSeconds, prompt] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4]), process.argv[5]];
const port = 18000 + Math.floor(Math.random() * 2000);
const dataDir = tempFolder('vlm-bench-app-api-');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');

/** Processes below `pid` (any depth), by /proc's parent links. */
function descendants(pid) {
  const children = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!children.has(ppid)) children.set(ppid, []);
      children.get(ppid).push(Number(entry));
    } catch { /* gone */ }
  }
  const out = [];
  const todo = [pid];
  while (todo.length) for (const c of children.get(todo.pop()) ?? []) { out.push(c); todo.push(c); }
  return out;
}

const exeName = (pid) => { try { return readlinkSync(`/proc/${pid}/exe`).split('/').pop(); } catch { return ''; } };
/** utime + stime of a process, in clock ticks. */
function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}
const TICKS = 100; // sysconf(_SC_CLK_TCK) on Linux

/** CPU % of each process over `seconds`, sampled from /proc/<pid>/stat. */
async function cpuOver(pids, seconds) {
  const before = pids.map(cpuTicks);
  const t0 = performance.now();
  await sleep(seconds * 1000);
  const wall = (performance.now() - t0) / 1000;
  return pids.map((p, i) => (100 * (cpuTicks(p) - before[i])) / TICKS / wall);
}

/** One reply in the window, timed inside the page from the click on Send. */
async function windowRound(b) {
  await (await byTestId(b, 'new-chat')).click();
  await waitFor(b, 'an empty chat', async () => (await allByTestId(b, 'msg-assistant')).length === 0, 20_000);
  const input = await byTestId(b, 'composer-input');
  await input.click();
  await input.setValue(prompt);
  await b.execute(() => {
    const bench = { t0: 0, first: 0, end: 0 };
    window.__bench = bench;
    const answer = () => document.querySelector('[data-testid="msg-live"] [data-testid="answer"]');
    const observer = new MutationObserver(() => {
      const now = performance.now();
      if (!bench.first && answer()?.textContent) bench.first = now;
      if (bench.first && !document.querySelector('[data-testid="msg-live"]') && document.querySelector('[data-testid="msg-assistant"]')) {
        bench.end = now;
        observer.disconnect();
      }
    });
    observer.observe(document.body, { childList: true, subtree: true, characterData: true });
    bench.t0 = performance.now();
    document.querySelector('[data-testid="send"]').click();
  });
  await waitFor(b, 'the reply', () => b.execute(() => window.__bench.end > 0), 600_000);
  const { t0, first, end } = await b.execute(() => window.__bench);
  const stats = await textOf(b, await byTestId(b, 'stats'));
  const tokens = Number(/(\d+) tokens/.exec(stats)?.[1]);
  const engineTps = Number(/([\d.]+) tok\/s/.exec(stats)?.[1]);
  return { ttft: (first - t0) / 1000, tps: (tokens - 1) / ((end - first) / 1000), tokens, engineTps };
}

/** One streamed request to the app's own server. */
async function apiRound() {
  const t0 = performance.now();
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'default', stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: Number(maxTokens),
    }),
  });
  if (!res.ok) throw new Error(`server: ${res.status} ${await res.text()}`);
  let first = 0; let last = 0; let deltas = 0; let tokens = 0; let buffer = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line.startsWith('data:') || line === 'data: [DONE]') continue;
      const event = JSON.parse(line.slice(5));
      if (event.usage?.completion_tokens) tokens = event.usage.completion_tokens;
      if (event.choices?.[0]?.delta?.content) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
        deltas++;
      }
    }
  }
  tokens ||= deltas;
  return { ttft: (first - t0) / 1000, tps: (tokens - 1) / ((last - first) / 1000), tokens };
}

await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: join(dataDir, 'hf') });
const b = await openApp();
const results = { window: [], api: [] };
try {
  await modelReady(b);
  await saveSettings(b, { temperature: '0', max_tokens: maxTokens, server_port: String(port) });
  await (await byTestId(b, 'setting-server_enabled')).click();
  await waitFor(b, 'the local server', async () => (await textOf(b, await byTestId(b, 'server-url'))).includes(`:${port}`), 30_000);
  await openPage(b, 'nav-chat', 'composer-input');

  // idle on the chat page, a finished chat shown (no reply under way)
  const app = appPids()[0];
  const web = descendants(app).filter((p) => exeName(p) === 'WebKitWebProcess');
  await windowRound(b); // warm-up (not counted): loads what the first reply loads
  await apiRound();
  await sleep(2000);
  const idle = await cpuOver([app, ...web], idleSeconds);
  console.log(`idle app-process-cpu% ${fmt(idle[0], 2)}`);
  web.forEach((p, i) => console.log(`idle webview-cpu% ${fmt(idle[i + 1], 2)} (WebKitWebProcess ${p}, the composer focused)`));
  // what the text caret's blinking costs: the same with nothing focused
  await b.execute(() => document.activeElement?.blur());
  const unfocused = await cpuOver(web, idleSeconds);
  web.forEach((p, i) => console.log(`idle webview-cpu% ${fmt(unfocused[i], 2)} (WebKitWebProcess ${p}, nothing focused)`));

  for (let i = 0; i < rounds; i++) {
    const before = web.map(cpuTicks);
    const t0 = performance.now();
    const w = await windowRound(b);
    const busy = web.map((p, k) => (100 * (cpuTicks(p) - before[k])) / TICKS / ((performance.now() - t0) / 1000));
    results.window.push(w);
    console.log(`window ttft_s ${fmt(w.ttft)} tok_s ${fmt(w.tps, 2)} tokens ${w.tokens} engine_tok_s ${w.engineTps} webview-cpu% ${busy.map((x) => fmt(x, 1)).join(',')}`);
    const a = await apiRound();
    results.api.push(a);
    console.log(`api ttft_s ${fmt(a.ttft)} tok_s ${fmt(a.tps, 2)} tokens ${a.tokens}`);
  }
  const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s[Math.floor((s.length - 1) / 2)]; };
  const m = (side, key) => median(results[side].map((r) => r[key]));
  console.log(`median window ttft_s ${fmt(m('window', 'ttft'))} tok_s ${fmt(m('window', 'tps'), 2)}`);
  console.log(`median api    ttft_s ${fmt(m('api', 'ttft'))} tok_s ${fmt(m('api', 'tps'), 2)}`);
  console.log(`ratio window/api ttft ${fmt(m('window', 'ttft') / m('api', 'ttft'), 2)} tok_s ${fmt(m('window', 'tps') / m('api', 'tps'), 2)}`);
} finally {
  await b.deleteSession().catch(() => {});
  stopDriver();
  setTimeout(() => process.exit(0), 2000).unref();
}
