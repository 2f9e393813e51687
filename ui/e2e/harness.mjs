// Starts the real app through tauri-driver (WebKitWebDriver) with its own
// data folder, and helpers to find things, wait and take screenshots.
import { spawn, execFileSync } from 'node:child_process';
import {
  cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { remote } from 'webdriverio';

export const here = dirname(fileURLToPath(import.meta.url));
export const root = resolve(here, '../..');
export const appBinary = process.env.VLM_APP_BIN ?? join(root, 'target/debug/vlm-chat');
const driverBinary = process.env.TAURI_DRIVER ?? join(root, '.tools/bin/tauri-driver');
export const shots = join(root, 'screenshots');
mkdirSync(shots, { recursive: true });

const tempFolders = [];
/** A new folder under the system's temp folder, removed when this suite's
 * process ends: a whole e2e run used to leave about 70 MB a suite behind
 * (data folders with their models), gigabytes on a machine that runs it often. */
export function tempFolder(prefix) {
  const folder = mkdtempSync(join(tmpdir(), prefix));
  tempFolders.push(folder);
  return folder;
}
process.on('exit', () => {
  // E2E_KEEP_TEMP=1 keeps them (the app's data folder and log) to see why a test failed
  if (process.env.E2E_KEEP_TEMP) {
    console.error(`# kept: ${tempFolders.join(' ')}`);
    return;
  }
  for (const folder of tempFolders) {
    // an app the suite could not stop may still write there: what stays, stays
    try { rmSync(folder, { recursive: true, force: true, maxRetries: 3 }); } catch { /* left behind */ }
  }
});

let driver = null;
let keyring = null;
let appEnvironment = null;

/** Starts tauri-driver once, with the app's environment (it passes it on).
 * The app's config folder (where the window's size and position are kept)
 * is a fresh one unless the suite names one: runs never share it. So is its
 * D-Bus session bus, with a keyring of its own on it (the app keeps the Hub
 * token there): a suite's token never lands in the desktop's keyring, and
 * the app's one-instance name on the bus is never seen by another run. */
export async function startDriver(env) {
  if (driver) return;
  const config = tempFolder('vlm-e2e-config-');
  const bus = await privateKeyring();
  appEnvironment = { ...process.env, XDG_CONFIG_HOME: config, DBUS_SESSION_BUS_ADDRESS: bus, ...env };
  driver = spawn(driverBinary, ['--port', '4444', '--native-port', '4445'], {
    env: appEnvironment,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  // the driver takes a moment to listen: the first session retries
}

/** The environment the driver starts the app with, for a process that must
 * count as the same app (a second launch). */
export function appEnv() {
  return appEnvironment;
}

/** A private session bus with an unlocked GNOME Keyring on it
 * (scripts/private-keyring.sh); it stops when its stdin closes. */
function privateKeyring() {
  keyring = spawn(join(root, 'scripts/private-keyring.sh'), [], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    keyring.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(out.split('\n')[0]);
    });
    keyring.on('exit', (code) => reject(new Error(`scripts/private-keyring.sh ended (${code}) before its keyring was ready`)));
  });
}

export function stopDriver() {
  if (driver) driver.kill();
  driver = null;
  keyring?.stdin.end();
  keyring = null;
}

/** A session on a new app process; `args`: its command line after the program. */
export async function openApp(args = []) {
  let lastError;
  for (let attempt = 0; attempt < 30; attempt++) {
    try {
      const browser = await remote({
        hostname: '127.0.0.1',
        port: 4444,
        logLevel: 'warn',
        capabilities: { 'tauri:options': { application: appBinary, args } },
      });
      await browser.setTimeout({ implicit: 0 });
      return browser;
    } catch (e) {
      lastError = e; // "Connection refused" while the driver starts
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  throw lastError;
}

/** Puts tiny random vision-language models (complete Hugging Face folders:
 * config with a vision tower, safetensors, tokenizer, chat template, image
 * processor) into `hfHome`, where the app looks for downloaded models: for
 * each `[repo, family]` the writer's `<family>/float` folder (`qwen2_vl`,
 * `qwen3_5`, `qwen3_vl`, `gemma3`, `gemma4`, …). Their answers are random
 * text, but the whole image path runs. The writer is an engine example that
 * `cargo test --all-targets` builds. */
export function writeTinyVisionModels(hfHome, repos) {
  const writer = process.env.VLM_TINY_VL_WRITER ?? join(root, 'target/debug/examples/write_tiny_vl_model');
  const out = tempFolder('vlm-e2e-vl-');
  execFileSync(writer, [out]);
  for (const [repo, family] of repos) {
    const folder = join(hfHome, 'hub', `models--${repo.replace('/', '--')}`);
    const commit = 'e2e'.padEnd(40, '0');
    cpSync(join(out, family, 'float'), join(folder, 'snapshots', commit), { recursive: true });
    mkdirSync(join(folder, 'refs'), { recursive: true });
    writeFileSync(join(folder, 'refs', 'main'), commit);
  }
}

/** The tiny Qwen2-VL alone as repository `repo` (see [`writeTinyVisionModels`]). */
export function writeTinyVisionModel(hfHome, repo) {
  writeTinyVisionModels(hfHome, [[repo, 'qwen2_vl']]);
}

/** Loads the model on disk with this gallery id from the Models page and
 * waits until it answers. */
export async function loadModelFromDisk(b, id, name) {
  await openPage(b, 'nav-models', 'local-models');
  await clickLoad(b, id);
  await waitFor(b, `${name} to load`, async () => (await textOf(b, await byTestId(b, 'loaded-model'))).includes(name));
}

/** Clicks Load on the Models page's row of model `id` once it is there and
 * enabled. Found and clicked inside the page in one step: the list redraws
 * as the disk scan and load state come in, and an element handle held
 * across a redraw goes stale. */
export async function clickLoad(b, id) {
  await waitFor(b, `${id}'s load button`, () => b.execute((i) => {
    const button = document.querySelector(`[data-testid="local-model"][data-model-id="${i}"] [data-testid="load-model"]`);
    if (!button || button.disabled) return false;
    button.click();
    return true;
  }, id), 20_000);
}

export const byTestId = (browser, id) => browser.$(`[data-testid="${id}"]`);
export const allByTestId = (browser, id) => browser.$$(`[data-testid="${id}"]`);

export async function waitFor(browser, what, predicate, timeout = 180_000) {
  await browser.waitUntil(predicate, { timeout, interval: 250, timeoutMsg: `timed out waiting for ${what}` });
}

/** Saves a WebDriver screenshot of the page as `screenshots/<name>.png`.
 * Without compositing (the app's choice on a machine with no GPU, see
 * src-tauri/src/webview_rendering.rs) WebKitGTK 2.50 answers a screenshot
 * only after the page's next paint, and a page where nothing changes does
 * not paint: on a static page (no blinking caret) the request waited until
 * WebdriverIO gave up after 120 s (its retry was answered at once), and moving
 * the mouse over the window answered it at once. So while the picture has
 * not come, the page is made to paint: an invisible outline set and cleared
 * on the document, every 300 ms (a paint before the request would not do). */
export async function shot(browser, name) {
  let done = false;
  let nudged = false;
  const taken = browser.takeScreenshot().finally(() => { done = true; });
  const nudge = (clear) => browser.execute((c) => {
    const html = document.documentElement;
    html.style.outline = c || html.style.outline ? '' : '1px solid transparent';
  }, clear).catch(() => {}); // a page being loaded again paints anyway
  for (let i = 0; i < 200 && !done; i++) {
    await Promise.race([taken, new Promise((r) => setTimeout(r, 300))]);
    if (!done) {
      nudged = true;
      await nudge(false);
    }
  }
  writeFileSync(join(shots, `${name}.png`), Buffer.from(await taken, 'base64'));
  // the outline, if one is left, goes (it draws nothing either way)
  if (nudged) await nudge(true);
}

/** The app window's position and size on the X screen. */
export function appWindowGeometry() {
  const ids = execFileSync('xdotool', ['search', '--onlyvisible', '--name', '^VLM Chat$']).toString().trim().split('\n');
  const out = execFileSync('xdotool', ['getwindowgeometry', '--shell', ids[ids.length - 1]]).toString();
  const v = Object.fromEntries(out.trim().split('\n').map((l) => l.split('=')));
  return { x: Number(v.X), y: Number(v.Y), width: Number(v.WIDTH), height: Number(v.HEIGHT) };
}

/** Presses keys on the real X keyboard (xdotool), over the app window: they
 * reach GTK first (the menu bar's shortcuts), where WebDriver's keys reach
 * only the page. */
export function xkeys(...keys) {
  const app = appWindowGeometry();
  execFileSync('xdotool', ['mousemove', String(app.x + app.width / 2), String(app.y + 60)]);
  execFileSync('xdotool', ['key', '--clearmodifiers', ...keys]);
}

/** Answers the app's native save dialog (GTK's file chooser, which WebDriver
 * cannot reach) on the real X keyboard: the dialog titled `title` is found,
 * `path` typed into its name field (GTK takes a full path there) and saved. */
export async function answerSaveDialog(browser, title, path) {
  let id = '';
  await waitFor(browser, `the "${title}" dialog`, async () => {
    try { id = execFileSync('xdotool', ['search', '--onlyvisible', '--name', title]).toString().trim().split('\n')[0]; } catch { id = ''; }
    return id !== '';
  }, 20_000);
  // focus, not activate: Xvfb runs no window manager
  execFileSync('xdotool', ['windowfocus', '--sync', id]);
  execFileSync('xdotool', ['key', '--clearmodifiers', 'ctrl+a']);
  execFileSync('xdotool', ['type', '--delay', '10', path]);
  execFileSync('xdotool', ['key', 'Return']);
}

/** The parent process id, from /proc/PID/stat ("pid (name) state ppid ..."). */
function parentOf(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** Ids of the app processes this suite's driver started (the driver starts
 * WebKitWebDriver, which starts the app), for tests that kill the app. */
export function appPids() {
  if (!driver) return [];
  const pids = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let exe;
    try { exe = readlinkSync(`/proc/${entry}/exe`); } catch { continue; }
    // a build that relinks the binary while the app runs leaves it "(deleted)"
    if (exe.replace(/ \(deleted\)$/, '') !== resolve(appBinary)) continue;
    let pid = Number(entry);
    try {
      while (pid > 1 && pid !== driver.pid) pid = parentOf(pid);
    } catch { continue; } // an ancestor exited meanwhile
    if (pid === driver.pid) pids.push(Number(entry));
  }
  return pids;
}

// ---- helpers shared by the suites (moved here from app.test.mjs) ----

/** The element's text as the DOM has it (WebDriver's getText leaves out clipped text). */
export const textOf = (b, el) => b.execute((e) => e.textContent, el);

export async function statusText(b) {
  return textOf(b, await byTestId(b, 'status-bar'));
}

/** The engine is ready and the status bar shows its figures. */
export async function modelReady(b) {
  await waitFor(b, 'the model to load', async () => {
    const bar = await byTestId(b, 'status-bar');
    return (await bar.getAttribute('data-engine')) === 'ready' && (await bar.getAttribute('data-stats')) === 'yes';
  });
}

export async function send(b, text) {
  const input = await byTestId(b, 'composer-input');
  await input.click();
  await input.setValue(text);
  await b.keys(['Enter']);
}

/** Opens a page from the sidebar and waits for an element of it. A click
 * that lands while the page is still settling after a reload is retried once
 * (with a screenshot of what was on screen, to see why). */
export async function openPage(b, nav, marker) {
  for (let attempt = 0; attempt < 2; attempt++) {
    await (await byTestId(b, nav)).waitForClickable({ timeout: 20_000 });
    await (await byTestId(b, nav)).click();
    try {
      await (await byTestId(b, marker)).waitForExist({ timeout: 10_000 });
      return;
    } catch (e) {
      if (attempt === 1) throw e;
      await shot(b, `retry-${nav}`);
    }
  }
}

/** Opens Settings, sets each `setting-<key>` field (they apply as they
 * change) and waits for "Saved.". */
export async function saveSettings(b, values) {
  await openPage(b, 'nav-settings', 'setting-system_prompt');
  for (const [key, value] of Object.entries(values)) {
    const field = await byTestId(b, `setting-${key}`);
    if ((await field.getTagName()) === 'select') await field.selectByAttribute('value', value);
    else await field.setValue(value);
  }
  await b.keys(['Tab']); // leaves the last field: its change applies now
  await waitFor(b, 'saved', async () => (await (await byTestId(b, 'settings-saved')).getText()) === 'Saved.', 10_000);
}

/** Drags `file` from a GTK window onto the app window with the mouse (XDND).
 * A gesture the drag lost (on a busy machine xdotool's pointer can outrun
 * GTK's drag start, and the button comes up before any drop) is made again:
 * what the app does with a drop that reached it is the test's to check. */
export async function dropFile(file) {
  for (let attempt = 1; ; attempt++) {
    const said = await dragOnce(file);
    if (said.includes('delivered')) return;
    if (attempt === 3) throw new Error(`the drag of ${file} never reached the app window (the drag source said: ${said.join(', ')})`);
    console.error(`# drag ${attempt} of ${file} was lost (${said.join(', ')}); dragging again`);
  }
}

/** One drag from a fresh drag-source window; returns what it said. */
async function dragOnce(file) {
  const app = appWindowGeometry();
  const source = spawn('/usr/bin/python3', [join(here, 'drag_source.py'), file, String(app.x + app.width + 40), '80'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const said = [];
  source.stdout.on('data', (d) => said.push(...d.toString().trim().split('\n')));
  try {
    await new Promise((resolve, reject) => {
      const t = setInterval(() => { if (said.includes('ready')) { clearInterval(t); resolve(); } }, 100);
      source.on('exit', (code) => { clearInterval(t); reject(new Error(`drag source exited ${code}`)); });
    });
    const ids = execFileSync('xdotool', ['search', '--onlyvisible', '--name', '^e2e-drag-source$']).toString().trim().split('\n');
    const geo = Object.fromEntries(execFileSync('xdotool', ['getwindowgeometry', '--shell', ids[0]]).toString().trim().split('\n').map((l) => l.split('=')));
    const sx = Number(geo.X) + 100; const sy = Number(geo.Y) + 60;
    const tx = app.x + Math.round(app.width / 2); const ty = app.y + Math.round(app.height / 2);
    const xdo = (...args) => execFileSync('xdotool', args.map(String));
    xdo('mousemove', sx, sy);
    xdo('mousedown', 1);
    for (let i = 1; i <= 20; i++) {
      xdo('mousemove', Math.round(sx + ((tx - sx) * i) / 20), Math.round(sy + ((ty - sy) * i) / 20));
      await new Promise((r) => setTimeout(r, 40));
    }
    await new Promise((r) => setTimeout(r, 300));
    xdo('mouseup', 1);
    await new Promise((resolve) => {
      const t = setInterval(() => { if (said.includes('done')) { clearInterval(t); resolve(); } }, 100);
      setTimeout(() => { clearInterval(t); resolve(); }, 10_000);
    });
    return said;
  } finally {
    source.kill();
  }
}

const axeSource = readFileSync(join(root, 'ui/node_modules/axe-core/axe.min.js'), 'utf8');

/** Runs axe-core on the page as it is now; returns its serious and critical
 * violations (rule, impact, the first offending elements), after writing all
 * of them to screenshots/axe-<name>.json. */
export async function axeAudit(b, name) {
  const loaded = await b.execute(() => typeof window.axe === 'object');
  if (!loaded) await b.execute(axeSource);
  const violations = await b.execute(async () => {
    // the settled page: a fade still running is measured at its in-between colours
    await Promise.all(document.getAnimations().map((a) => a.finished.catch(() => {})));
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ') + ' — ' + n.failureSummary) }));
  });
  writeFileSync(join(shots, `axe-${name}.json`), JSON.stringify(violations, null, 2));
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/** A PDF of text pages (Helvetica, one line per entry), with a correct cross-reference table. */
export function textPdf(pages) {
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    `<< /Type /Pages /Kids [${pages.map((_, k) => `${4 + 2 * k} 0 R`).join(' ')}] /Count ${pages.length} >>`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
  ];
  pages.forEach((lines, k) => {
    objects.push(`<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents ${5 + 2 * k} 0 R /Resources << /Font << /F1 3 0 R >> >> >>`);
    const content = `BT /F1 12 Tf 14 TL 72 720 Td\n${lines.map((l) => `(${l}) Tj T*`).join('\n')}\nET`;
    objects.push(`<< /Length ${content.length} >>\nstream\n${content}\nendstream`);
  });
  let out = '%PDF-1.4\n';
  const offsets = objects.map((o, i) => { const at = out.length; out += `${i + 1} 0 obj\n${o}\nendobj\n`; return at; });
  const xref = out.length;
  out += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n${offsets.map((o) => `${String(o).padStart(10, '0')} 00000 n \n`).join('')}`;
  out += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return out;
}
