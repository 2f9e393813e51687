// The app as a desktop app, in its real window: an image named on the
// command line starts a chat with it; the native menu bar's shortcuts,
// pressed on the real X keyboard, are taken by GTK's menu (the page never
// sees the key) and run the page's actions; a second launch with an image
// while the app runs hands the image to it and exits; links open in the
// browser (a stand-in xdg-open records them) after the app's scheme check;
// a Hub token saved in Settings goes to the system keychain (never the
// database) and shows masked; Quit (Ctrl+Q) ends the app and the window's
// size and position, and the token, come back at the next start.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  allByTestId, appBinary, appEnv, appPids, appWindowGeometry, byTestId, openApp, openPage, shot, shots, startDriver,
  stopDriver, tempFolder, waitFor, xkeys,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-desktop-');
const configDir = join(dataDir, 'config');
const photo = join(dataDir, 'photo.png');
const secondPhoto = join(dataDir, 'second.png');
/** A made-up token (the local app never sends it anywhere in this suite). */
const token = 'hf_e2eTokenNotRealAtAllQwErTy7z9K';
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
    execFileSync('convert', ['-size', '40x30', 'xc:#36c', secondPhoto]);
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

  it('hands an image opened with a second launch to the running app, which starts a chat with it', async () => {
    const composerWidths = () => browser.execute(() => [...document.querySelectorAll('[data-testid="composer-thumb"] img')].map((i) => i.naturalWidth));
    const running = appPids();
    assert.equal(running.length, 1);
    // the first photo is put away (an image waiting in the composer goes along to the next chat)
    await (await browser.$('[data-testid="composer-thumb"] [data-testid="remove-thumb"]')).click();
    await waitFor(browser, 'an empty composer', async () => (await composerWidths()).length === 0, 10_000);
    // `vlm-chat second.png` from a file manager or a terminal, the same user and data folder
    const second = spawn(appBinary, [secondPhoto], { env: appEnv(), stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    second.stderr.on('data', (d) => { stderr += d; });
    const code = await new Promise((resolve) => second.on('exit', resolve));
    assert.equal(code, 0, `the second launch exits at once, having handed over its file: ${stderr}`);
    await waitFor(browser, 'the second photo in a new chat', async () => (await composerWidths()).includes(40), 30_000);
    assert.deepEqual(await composerWidths(), [40], 'a chat of its own, with only that image');
    assert.equal((await allByTestId(browser, 'empty-chat')).length, 1, 'a new chat, waiting for the question');
    assert.deepEqual(appPids(), running, 'still the one app');
    await shot(browser, '34-second-launch-handed-over');
  });

  it('keeps a Hub token saved in Settings in the system keychain and shows it masked', async () => {
    await openPage(browser, 'nav-settings', 'hub-token-section');
    await waitFor(browser, 'the token state', async () => /No token/.test(await (await byTestId(browser, 'hub-token-state')).getText()), 10_000);
    // Set, not typed: WebKitWebDriver drops keys under load (a CI run once
    // saved a few characters of the token, which masked to a bare '…').
    await browser.execute((t) => {
      const input = document.querySelector('[data-testid="hub-token-input"]');
      input.value = t;
      input.dispatchEvent(new Event('input', { bubbles: true }));
    }, token);
    await (await byTestId(browser, 'hub-token-save')).click();
    const error = () => byTestId(browser, 'hub-token-error');
    await waitFor(browser, 'the token saved (or an error)', async () =>
      (await (await byTestId(browser, 'hub-token-masked')).isExisting()) || (await (await error()).isExisting()), 15_000);
    assert.equal((await (await error()).isExisting()) ? await (await error()).getText() : null, null, 'no keychain error');
    assert.equal(await (await byTestId(browser, 'hub-token-masked')).getText(), 'hf_…7z9K');
    assert.equal(await (await byTestId(browser, 'hub-token-input')).getValue(), '', 'the field does not keep it');
    const page = await browser.execute(() => document.body.innerHTML);
    assert.ok(!page.includes(token.slice(3, 20)), 'the page never holds the token');
    // left and opened again: read back from the keychain
    await openPage(browser, 'nav-models', 'local-models');
    await openPage(browser, 'nav-settings', 'hub-token-section');
    await waitFor(browser, 'the masked token again', async () => (await byTestId(browser, 'hub-token-masked')).isExisting(), 10_000);
    await browser.execute((el) => el.scrollIntoView({ block: 'center' }), await byTestId(browser, 'hub-token-section'));
    await shot(browser, '35-hub-token-saved');
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

  it('still has the Hub token after the restart, masked, and never in its database; Remove deletes it', async () => {
    await openPage(browser, 'nav-settings', 'hub-token-section');
    await waitFor(browser, 'the masked token after the restart', async () => (await byTestId(browser, 'hub-token-masked')).isExisting(), 10_000);
    assert.equal(await (await byTestId(browser, 'hub-token-masked')).getText(), 'hf_…7z9K');
    for (const file of ['chats.db', 'chats.db-wal']) {
      if (existsSync(join(dataDir, file))) assert.ok(!readFileSync(join(dataDir, file)).includes(token), `${file} holds no token`);
    }
    await (await byTestId(browser, 'hub-token-remove')).click();
    await waitFor(browser, 'the token gone', async () => !(await (await byTestId(browser, 'hub-token-masked')).isExisting()), 10_000);
    assert.match(await (await byTestId(browser, 'hub-token-state')).getText(), /No token/);
  });
});
