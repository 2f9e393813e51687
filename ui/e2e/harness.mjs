// Starts the real app through tauri-driver (WebKitWebDriver) with its own
// data folder, and helpers to find things, wait and take screenshots.
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { remote } from 'webdriverio';

export const here = dirname(fileURLToPath(import.meta.url));
export const root = resolve(here, '../..');
export const appBinary = process.env.VLM_APP_BIN ?? join(root, 'target/debug/vlm-chat');
const driverBinary = process.env.TAURI_DRIVER ?? join(root, '.tools/bin/tauri-driver');
export const shots = join(root, 'screenshots');
mkdirSync(shots, { recursive: true });

let driver = null;

/** Starts tauri-driver once, with the app's environment (it passes it on). */
export async function startDriver(env) {
  if (driver) return;
  driver = spawn(driverBinary, ['--port', '4444', '--native-port', '4445'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  // the driver takes a moment to listen: the first session retries
}

export function stopDriver() {
  if (driver) driver.kill();
  driver = null;
}

export async function openApp() {
  let lastError;
  for (let attempt = 0; attempt < 30; attempt++) {
    try {
      const browser = await remote({
        hostname: '127.0.0.1',
        port: 4444,
        logLevel: 'warn',
        capabilities: { 'tauri:options': { application: appBinary } },
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

export const byTestId = (browser, id) => browser.$(`[data-testid="${id}"]`);
export const allByTestId = (browser, id) => browser.$$(`[data-testid="${id}"]`);

export async function waitFor(browser, what, predicate, timeout = 180_000) {
  await browser.waitUntil(predicate, { timeout, interval: 250, timeoutMsg: `timed out waiting for ${what}` });
}

export async function shot(browser, name) {
  await browser.saveScreenshot(join(shots, `${name}.png`));
}

/** The app window's position and size on the X screen. */
export function appWindowGeometry() {
  const ids = execFileSync('xdotool', ['search', '--onlyvisible', '--name', '^VLM Chat$']).toString().trim().split('\n');
  const out = execFileSync('xdotool', ['getwindowgeometry', '--shell', ids[ids.length - 1]]).toString();
  const v = Object.fromEntries(out.trim().split('\n').map((l) => l.split('=')));
  return { x: Number(v.X), y: Number(v.Y), width: Number(v.WIDTH), height: Number(v.HEIGHT) };
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
    if (exe !== resolve(appBinary)) continue;
    let pid = Number(entry);
    try {
      while (pid > 1 && pid !== driver.pid) pid = parentOf(pid);
    } catch { continue; } // an ancestor exited meanwhile
    if (pid === driver.pid) pids.push(Number(entry));
  }
  return pids;
}
