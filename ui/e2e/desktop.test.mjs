// The app as a desktop app, in its real window: an image named on the
// command line starts a chat with it; the native menu bar's shortcuts,
// pressed on the real X keyboard, are taken by GTK's menu (the page never
// sees the key) and run the page's actions; links open in the browser (a
// stand-in xdg-open records them) after the app's scheme check; Quit
// (Ctrl+Q) ends the app and the window's size and position come back at
// the next start.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  allByTestId, appPids, appWindowGeometry, byTestId, openApp, shot, shots, startDriver, stopDriver, waitFor, xkeys,
} from './harness.mjs';

const dataDir = mkdtempSync(join(tmpdir(), 'vlm-e2e-desktop-'));
const configDir = join(dataDir, 'config');
const photo = join(dataDir, 'photo.png');
// the system's opener for links, replaced by one that writes down what it was asked to open
const binDir = join(dataDir, 'bin');
const opened = join(dataDir, 'opened-links.txt');
let browser;

const openedLinks = () => (existsSync(opened) ? readFileSync(opened, 'utf8').trim().split('\n') : []);
const toasts = () => browser.execute(() => [...document.querySelectorAll('[data-testid="toast"]')].map((t) => t.textContent));

/** The app window's X id. */
function appWindowId() {
  const ids = execFileSync('xdotool', ['search', '--onlyvisible', '--name', '^VLM Chat$']).toString().trim().split('\n');
  return ids[ids.length - 1];
}

describe('the app in its desktop shell', () => {
  before(async () => {
    mkdirSync(binDir);
    writeFileSync(join(binDir, 'xdg-open'), `#!/bin/sh\nprintf '%s\\n' "$@" >> '${opened}'\n`);
    chmodSync(join(binDir, 'xdg-open'), 0o755);
    execFileSync('convert', ['-size', '48x32', 'xc:#c63', photo]);
    await startDriver({ VLM_DATA_DIR: dataDir, XDG_CONFIG_HOME: configDir, PATH: `${binDir}:${process.env.PATH}` });
    // `vlm-chat photo.png`
    browser = await openApp([photo]);
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('starts a chat with an image named on the command line', async () => {
    await waitFor(browser, 'the photo in the composer', async () => (await allByTestId(browser, 'composer-thumb')).length === 1, 60_000);
    const thumb = await browser.$('[data-testid="composer-thumb"] img');
    await waitFor(browser, 'its thumbnail to show', async () => browser.execute((e) => e.complete && e.naturalWidth === 48, thumb), 10_000);
    assert.equal((await allByTestId(browser, 'empty-chat')).length, 1, 'a new chat, waiting for the question');
    await shot(browser, '30-opened-from-command-line');
  });

  it('runs the menu bar’s shortcuts through GTK’s menu, not the page', async () => {
    // count the key presses that reach the page
    await browser.execute(() => {
      window.pageKeys = [];
      document.addEventListener('keydown', (e) => window.pageKeys.push(`${e.ctrlKey ? 'ctrl+' : ''}${e.key}`), true);
    });
    const sidebarShown = async () => (await byTestId(browser, 'new-chat')).isDisplayed();
    assert.equal(await sidebarShown(), true);
    // Chat › Toggle Sidebar (Ctrl+Shift+S)
    xkeys('ctrl+shift+s');
    await waitFor(browser, 'the sidebar to hide', async () => !(await sidebarShown()), 10_000);
    xkeys('ctrl+shift+s');
    await waitFor(browser, 'the sidebar to come back', sidebarShown, 10_000);
    // Edit › Settings… (Ctrl+,)
    xkeys('ctrl+comma');
    await (await byTestId(browser, 'settings-page')).waitForExist({ timeout: 10_000 });
    // File › New Chat (Ctrl+N)
    xkeys('ctrl+n');
    await (await byTestId(browser, 'empty-chat')).waitForExist({ timeout: 10_000 });
    // the menu took each shortcut: the page saw the modifiers go down, no chord
    const chords = await browser.execute(() => window.pageKeys.filter((k) => k.startsWith('ctrl+') && !['ctrl+Control', 'ctrl+Shift'].includes(k)));
    assert.deepEqual(chords, []);
    // a plain key still reaches the page (the counter works)
    xkeys('x');
    await waitFor(browser, 'the x key in the page', async () => (await browser.execute(() => window.pageKeys)).includes('x'), 5_000);
    // the menu bar itself, with its Chat menu open (F10 opens GTK's menu bar): WebDriver's
    // screenshots show only the page, so this one is of the X screen
    xkeys('F10', 'Right', 'Right');
    await new Promise((r) => setTimeout(r, 500)); // for the picture only; nothing is asserted on it
    execFileSync('import', ['-window', 'root', '-crop', '1200x800+0+0', join(shots, '33-menu-bar-chat-menu.png')]);
    xkeys('Escape', 'Escape', 'Escape');
  });

  it('opens web links in the browser and refuses other links, saying why', async () => {
    // links as a reply renders them (the tiny model's text is random, so the links are put in the chat here)
    await browser.execute(() => {
      const reply = document.createElement('div');
      reply.innerHTML = '<a data-testid="web-link" href="https://example.com/page?q=1">the page</a> <a data-testid="file-link" href="file:///etc/passwd">a file</a>';
      document.querySelector('[data-testid="messages"]').append(reply);
    });
    const page = await browser.getUrl();
    await (await byTestId(browser, 'web-link')).click();
    await waitFor(browser, 'the browser to be asked', async () => openedLinks().length === 1, 10_000);
    assert.deepEqual(openedLinks(), ['https://example.com/page?q=1']);

    await (await byTestId(browser, 'file-link')).click();
    await waitFor(browser, 'the refusal', async () => (await toasts()).some((t) => /Links to file: are not opened/.test(t)), 10_000);
    await shot(browser, '31-link-refused');
    assert.deepEqual(openedLinks(), ['https://example.com/page?q=1'], 'the file link was never handed to the opener');
    assert.equal(await browser.getUrl(), page, 'the window stayed on the app');
  });

  it('remembers the window’s size and position after Quit', async () => {
    const id = appWindowId();
    execFileSync('xdotool', ['windowsize', id, '1000', '700']);
    execFileSync('xdotool', ['windowmove', id, '60', '40']);
    await waitFor(browser, 'the new geometry', async () => {
      const g = appWindowGeometry();
      return g.width === 1000 && g.height === 700 && g.x === 60 && g.y === 40;
    }, 10_000);
    const before = appWindowGeometry();
    const pids = appPids();
    assert.ok(pids.length >= 1, 'the app process is found');
    // File › Quit (Ctrl+Q): the app ends, the window state is written on the way out
    xkeys('ctrl+q');
    await waitFor(browser, 'the app to quit', async () => appPids().length === 0, 30_000);
    const saved = JSON.parse(readFileSync(join(configDir, 'dev.vlm.chat', '.window-state.json'), 'utf8'));
    assert.equal(saved.main.width, 1000);
    assert.equal(saved.main.height, 700);
    await browser.deleteSession().catch(() => {}); // its app is gone

    browser = await openApp();
    await (await byTestId(browser, 'composer-input')).waitForExist({ timeout: 60_000 });
    assert.deepEqual(appWindowGeometry(), before);
    // no file named this time: no image waits in the composer
    assert.equal((await allByTestId(browser, 'composer-thumb')).length, 0);
    await shot(browser, '32-window-restored');
  });
});
