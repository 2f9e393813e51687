// The app's side of scripts/bench-app-vs-api.sh: starts the real app (window
// open under Xvfb, fresh data folder, the built-in default model), turns on
// its local OpenAI-compatible server, then for the same prompt, greedily,
// ROUNDS times each:
//   window: time from clicking Send to the first answer text in the chat
//           (measured inside the page), and the streaming rate (the stored
//           reply's token count over the time from first text to the end);
//   regenerate: the same from clicking Regenerate on that answer (the same
//           prompt again, as the API's);
//   api:    the same through the app's own server (a streamed
//           /v1/chat/completions): time to the first content delta, and the
//           rate from the first delta to the last;
// and the web view process's CPU over IDLE_S seconds, idle on the chat page.
// For each window reply it also prints where the time went: the page's own
// timeline (ui/src/timeline.ts: ms after Send of each step, and what its
// stream events, redraws and renders cost), the backend's timings of Send
// (debug lines of the app's log), the frames the window put on screen
// between Send and the first text and while the reply streamed
// (window_frames.py, X DAMAGE; needs $FRAMES_PYTHON with python-xlib) and the CPU of the app's process (the
// engine runs in it), the web view and the X server while it streamed.
// Prints one line per measurement; never asserts (timings are not tests).
// Usage: node scripts/bench/app_vs_api.mjs ROUNDS MAX_TOKENS IDLE_S PROMPT   (needs DISPLAY and tauri-driver)
import { spawn } from 'node:child_process';
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
  return timeReply(b, 'send');
}

/** Clicks the button `testId` and times the reply it starts, inside the page. */
async function timeReply(b, testId) {
  // clicked as a person clicks, after what came before is drawn (a click in
  // the same millisecond as the last key would count the typing's own frame
  // as Send's)
  await sleep(250);
  await b.execute((testId) => {
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
    document.querySelector(`[data-testid="${testId}"]`).click();
  }, testId);
  // one call that returns when the reply ends: polling (WebDriver's
  // waitUntil runs a script in the page 4 times a second) would cost the
  // web view CPU that the API's side does not pay
  await b.executeAsync((done) => {
    const check = () => (window.__bench.end > 0 ? done() : setTimeout(check, 200));
    check();
  });
  const { t0, first, end } = await b.execute(() => window.__bench);
  const origin = await b.execute(() => performance.timeOrigin);
  // the page's own timeline of this reply (ui/src/timeline.ts)
  const line = await b.execute(() => window.__vlmTimeline ?? null);
  const stats = await textOf(b, await byTestId(b, 'stats'));
  const tokens = Number(/(\d+) tokens/.exec(stats)?.[1]);
  const engineTps = Number(/([\d.]+) tok\/s/.exec(stats)?.[1]);
  const engineTtft = /TTFT (\d+) ms/.exec(stats)?.[1];
  const frames = framesBetween(origin + t0, origin + first);
  const streamed = framesBetween(origin + first, origin + end);
  // the prompt the engine read, and how much of it its cache already held
  const read = /prompt (\d+) tokens(?: \((\d+) cached)?/.exec(stats);
  return {
    ttft: (first - t0) / 1000, tps: (tokens - 1) / ((end - first) / 1000), tokens, engineTps, line: line && timelineText(line, t0, first),
    prompt: read ? `${read[1]} (${read[2] ?? 0} cached)` : 'n/a',
    clock: line && { origin, t0, marks: line.marks, engineTtft }, frames, streamed,
  };
}

// The window's frames: window_frames.py writes each rectangle the X server
// was given, on CLOCK_MONOTONIC (node's hrtime); the page's times are wall
// clock (its timeOrigin), so the two clocks' offset is taken once (±1 ms).
const framesFile = join(dataDir, 'frames.txt');
const monoMinusWall = Number(process.hrtime.bigint()) / 1e6 - (performance.timeOrigin + performance.now());
/** "2 frames (1.6 Mpx)": what the window put on screen between two wall-clock instants (ms). */
function framesBetween(from, to) {
  if (!process.env.FRAMES_PYTHON) return 'n/a (no FRAMES_PYTHON)';
  let rows = [];
  try { rows = readFileSync(framesFile, 'utf8').trim().split('\n').map((l) => l.split(' ').map(Number)); } catch { return 'n/a (no frames recorded)'; }
  const within = rows.filter(([at]) => at >= from + monoMinusWall && at <= to + monoMinusWall);
  const pixels = within.reduce((sum, [, , , w, h]) => sum + w * h, 0);
  return `${within.length} frames (${fmt(pixels / 1e6, 1)} Mpx)`;
}

/** "submit 0 · invoke 1 · started 15 · … | before the first piece: 2 events 0.3 ms · 0 draws 0 ms ·
 * 2 renders 1.2 ms | in all: 120 events 14 ms · …": when each step of the reply happened in the
 * page (ms after the click on Send), and what its work cost while the engine read the prompt and in all. */
function timelineText({ marks, work, untilFirstPiece }, t0, first) {
  const order = ['submit', 'invoke', 'chat-created', 'started', 'sent', 'sent-shown', 'first-piece', 'first-draw'];
  const at = order.filter((k) => k in marks).map((k) => `${k} ${fmt(marks[k] - t0, 1)}`);
  at.push(`text-seen ${fmt(first - t0, 1)}`);
  const costs = (w) => Object.entries(w).map(([k, x]) => `${x.count} ${k}s ${fmt(x.ms, 1)} ms`).join(' · ');
  // what the page did while the engine read the prompt (an app without it: n/a)
  const before = untilFirstPiece ? costs(untilFirstPiece) : 'n/a';
  return `${at.join(' · ')} | before the first piece: ${before} | in all: ${costs(work)}`;
}

/** The app's default repetition penalty (settings.rs), set in the window and sent to the API
 * too: the same request on both sides (a penalized greedy row is not the batched argmax). */
const REPETITION_PENALTY = '1.1';

/** One streamed request to the app's own server. */
async function apiRound() {
  const t0 = performance.now();
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'default', stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: Number(maxTokens),
      repetition_penalty: Number(REPETITION_PENALTY),
    }),
  });
  if (!res.ok) throw new Error(`server: ${res.status} ${await res.text()}`);
  let first = 0; let last = 0; let deltas = 0; let tokens = 0; let buffer = ''; let read = 'n/a';
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
      if (event.usage?.prompt_tokens) read = `${event.usage.prompt_tokens} (${event.usage.prompt_tokens_details?.cached_tokens ?? 0} cached)`;
      if (event.choices?.[0]?.delta?.content) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
        deltas++;
      }
    }
  }
  tokens ||= deltas;
  return { ttft: (first - t0) / 1000, tps: (tokens - 1) / ((last - first) / 1000), tokens, prompt: read };
}

// the app's own timings of Send (debug lines of its log, see src-tauri/src/replies.rs)
await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: join(dataDir, 'hf'), VLM_LOG: 'info,vlm_chat=debug' });
const logFile = join(dataDir, 'vlm-chat.log');
let logRead = 0;
/** The backend's timing lines logged since the last call. */
function freshTimingLines() {
  let text = '';
  try { text = readFileSync(logFile, 'utf8'); } catch { return null; }
  const fresh = text.slice(logRead);
  logRead = text.length;
  return fresh.split('\n').filter((l) => / (send_message|reply (start|submitted|first piece sent)) /.test(`${l} `));
}
/** Their fields only. */
function backendTimings(lines) {
  if (!lines) return 'no log';
  return lines.filter((l) => / (send_message|reply start) /.test(`${l} `))
    .map((l) => l.slice(l.indexOf(': ') + 2).replace(/(\d+\.\d)\d+/g, '$1')).join(' | ') || 'none logged';
}
/** When a log line was written, in ms since the epoch (its RFC 3339 timestamp, µs kept). */
function loggedAt(line) {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z/.exec(line);
  return m ? Date.parse(`${m[1]}Z`) + Number(m[2] ?? 0) * 1000 : NaN;
}
/** "command in 6 · submitted 8 · started out 10 · first piece out 71 | …": the
 * backend's steps of a window reply on the page's clock (ms after the click on
 * Send, from the log lines' timestamps and the page's timeOrigin: one machine,
 * one clock), and so how long each crossing between page and backend took. */
function acrossText(lines, { origin, t0, marks, engineTtft }) {
  const find = (re) => lines?.find((l) => re.test(l));
  const send = find(/ send_message /);
  const [submitted, start, first] = [/ reply submitted/, / reply start /, / reply first piece sent/].map(find);
  if (!send || !submitted || !start || !first || !origin) return 'n/a (an app without these debug lines)';
  const page = (line, minus = 0) => loggedAt(line) - minus - origin - t0;
  const began = page(send, Number(/total_ms=([\d.]+)/.exec(send)?.[1]));
  const at = { in: began, submitted: page(submitted), startedOut: page(start), firstOut: page(first) };
  const mark = (k) => marks[k] - t0;
  return `command in ${fmt(at.in, 1)} · submitted ${fmt(at.submitted, 1)} · started out ${fmt(at.startedOut, 1)} · first piece out ${fmt(at.firstOut, 1)}`
    + ` | invoke→command ${fmt(at.in - mark('invoke'), 1)} · started→page ${fmt(mark('started') - at.startedOut, 1)}`
    + ` · first piece→page ${fmt(mark('first-piece') - at.firstOut, 1)} · submitted→first piece out ${fmt(at.firstOut - at.submitted, 1)} (engine's TTFT ${engineTtft ?? 'n/a'} ms)`;
}
const frameWatch = process.env.FRAMES_PYTHON
  ? spawn(process.env.FRAMES_PYTHON, [new URL('window_frames.py', import.meta.url).pathname, framesFile], { stdio: 'inherit' })
  : null;
const b = await openApp();
const results = { window: [], regenerate: [], api: [] };
try {
  await modelReady(b);
  await b.setTimeout({ script: 600_000 });
  await saveSettings(b, {
    temperature: '0', repetition_penalty: REPETITION_PENALTY, max_tokens: maxTokens, server_port: String(port),
  });
  await (await byTestId(b, 'setting-server_enabled')).click();
  await waitFor(b, 'the local server', async () => (await textOf(b, await byTestId(b, 'server-url'))).includes(`:${port}`), 30_000);
  await openPage(b, 'nav-chat', 'composer-input');

  // idle on the chat page, a finished chat shown (no reply under way)
  const app = appPids()[0];
  const web = descendants(app).filter((p) => exeName(p) === 'WebKitWebProcess');
  // how the web view draws (src-tauri/src/webview_rendering.rs): the figures depend on it
  const compositing = web.map((p) => {
    try {
      const set = readFileSync(`/proc/${p}/environ`, 'utf8').split('\0').find((v) => v.startsWith('WEBKIT_DISABLE_COMPOSITING_MODE='));
      return set ? `off (${set})` : 'on';
    } catch { return 'unknown'; }
  });
  console.log(`webview compositing ${compositing.join(',')}`);
  await windowRound(b); // warm-up (not counted): loads what the first reply loads
  await apiRound();
  freshTimingLines();
  await sleep(2000);
  const idle = await cpuOver([app, ...web], idleSeconds);
  console.log(`idle app-process-cpu% ${fmt(idle[0], 2)}`);
  web.forEach((p, i) => console.log(`idle webview-cpu% ${fmt(idle[i + 1], 2)} (WebKitWebProcess ${p}, the composer focused)`));
  // what the text caret's blinking costs: the same with nothing focused
  await b.execute(() => document.activeElement?.blur());
  const unfocused = await cpuOver(web, idleSeconds);
  web.forEach((p, i) => console.log(`idle webview-cpu% ${fmt(unfocused[i], 2)} (WebKitWebProcess ${p}, nothing focused)`));

  // the X server draws what the window shows: its CPU is the window's too
  const display = process.env.DISPLAY ?? '';
  const xserver = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && exeName(p) === 'Xvfb').map(Number).find((p) => {
    try { return readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').includes(display); } catch { return false; }
  });
  /** `f`'s result, and the CPU % of the app's process, of each web view process and of the X server while it ran. */
  const withCpu = async (f) => {
    const pids = [app, ...web, ...(xserver ? [xserver] : [])];
    const before = pids.map(cpuTicks);
    const t0 = performance.now();
    const r = await f();
    const wall = (performance.now() - t0) / 1000;
    const cpu = pids.map((p, k) => fmt((100 * (cpuTicks(p) - before[k])) / TICKS / wall, 1));
    const x = xserver ? ` xserver-cpu% ${cpu.pop()}` : '';
    return [r, `app-cpu% ${cpu[0]} webview-cpu% ${cpu.slice(1).join(',')}${x}`];
  };
  for (let i = 0; i < rounds; i++) {
    const [w, wCpu] = await withCpu(() => windowRound(b));
    results.window.push(w);
    console.log(`window ttft_s ${fmt(w.ttft)} tok_s ${fmt(w.tps, 2)} tokens ${w.tokens} engine_tok_s ${w.engineTps} prompt ${w.prompt} ${wCpu}`);
    console.log(`  page timeline (ms after Send): ${w.line ?? 'none (an app without ui/src/timeline.ts)'}`);
    console.log(`  drawn before the first text: ${w.frames}; while it streamed: ${w.streamed}`);
    const lines = freshTimingLines();
    console.log(`  backend (ms): ${backendTimings(lines)}`);
    console.log(`  across (ms after Send): ${w.clock ? acrossText(lines, w.clock) : 'n/a'}`);
    // the same prompt again in the window: Regenerate on the answer the round
    // left (its prompt is the API's, the same tokens cached)
    const r = await timeReply(b, 'regenerate');
    results.regenerate.push(r);
    console.log(`regenerate ttft_s ${fmt(r.ttft)} tok_s ${fmt(r.tps, 2)} tokens ${r.tokens} prompt ${r.prompt} | drawn before the first text: ${r.frames}`);
    freshTimingLines();
    const [a, aCpu] = await withCpu(() => apiRound());
    results.api.push(a);
    console.log(`api ttft_s ${fmt(a.ttft)} tok_s ${fmt(a.tps, 2)} tokens ${a.tokens} prompt ${a.prompt} ${aCpu}`);
  }
  const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s[Math.floor((s.length - 1) / 2)]; };
  const m = (side, key) => median(results[side].map((r) => r[key]));
  console.log(`median window ttft_s ${fmt(m('window', 'ttft'))} tok_s ${fmt(m('window', 'tps'), 2)}`);
  console.log(`median api    ttft_s ${fmt(m('api', 'ttft'))} tok_s ${fmt(m('api', 'tps'), 2)}`);
  console.log(`median regenerate ttft_s ${fmt(m('regenerate', 'ttft'))} tok_s ${fmt(m('regenerate', 'tps'), 2)}`);
  console.log(`ratio window/api ttft ${fmt(m('window', 'ttft') / m('api', 'ttft'), 2)} tok_s ${fmt(m('window', 'tps') / m('api', 'tps'), 2)}`);
  console.log(`ratio regenerate/api ttft ${fmt(m('regenerate', 'ttft') / m('api', 'ttft'), 2)} tok_s ${fmt(m('regenerate', 'tps') / m('api', 'tps'), 2)}`);
} finally {
  await b.deleteSession().catch(() => {});
  stopDriver();
  frameWatch?.kill();
  setTimeout(() => process.exit(0), 2000).unref();
}
