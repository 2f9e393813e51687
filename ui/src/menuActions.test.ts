// The native menu's half in the page: a `menu-action` event runs the named
// action through App.run (the code the buttons and shortcuts run), and
// files the app was asked to open start a chat with them. The events go
// through Tauri's real event API, with the IPC mocked.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { emit } from '@tauri-apps/api/event';
import { App } from './app';
import { MENU_ACTIONS, menuAction } from './menuActions';

afterEach(() => {
  clearMocks();
  document.body.innerHTML = '';
  localStorage.clear(); // the sidebar's hidden state is remembered there
});

describe('menu action names', () => {
  it('are the menu’s ids, and nothing else passes', () => {
    for (const id of MENU_ACTIONS) expect(menuAction(id)).toBe(id);
    for (const other of ['quit', 'copy', 'toString', '', 42, null, undefined, { action: 'stop' }]) expect(menuAction(other)).toBeNull();
  });
});

/** The app on a mocked backend: no model, no chats; `opened` is what take_opened_files hands out once. */
async function startedApp(opened: string[] = []) {
  const calls: { cmd: string; args: unknown }[] = [];
  let waiting = opened;
  mockIPC((cmd, args) => {
    calls.push({ cmd, args });
    switch (cmd) {
      case 'engine_status': return { state: 'unloaded', loading: null, model: null, knobs: null, error: null };
      case 'server_status': return { running: false, url: null, error: null };
      case 'get_settings': return { settings: { thinking: true }, restart_needed: false, notes: [] };
      case 'list_chats': case 'active_replies': case 'list_bulk_jobs': case 'list_presets': return [];
      case 'take_opened_files': { const files = waiting; waiting = []; return files; }
      case 'add_attachment_path': return { sha256: 'a'.repeat(64), mime: 'image/png', size: 1, path: (args as { path: string }).path };
      default: return null;
    }
  }, { shouldMockEvents: true });
  const pickChatFile = vi.fn(async () => null);
  const app = new App({ pickFiles: async () => [], pickChatFile, pickExportFolder: async () => null, pickModel: async () => null, onDrop: () => {} });
  document.body.append(app.el);
  await app.start();
  return { app, calls, pickChatFile };
}

const settle = () => new Promise((r) => setTimeout(r, 0));

describe('the native menu', () => {
  it('runs each action it names through App.run, once', async () => {
    const { app } = await startedApp();
    const run = vi.spyOn(app, 'run');
    for (const id of MENU_ACTIONS) {
      await emit('menu-action', id);
      expect(run).toHaveBeenLastCalledWith(id);
    }
    expect(run).toHaveBeenCalledTimes(MENU_ACTIONS.length);
    // an id the page does not know runs nothing
    await emit('menu-action', 'format-disk');
    expect(run).toHaveBeenCalledTimes(MENU_ACTIONS.length);
  });

  it('does what the buttons and shortcuts do', async () => {
    const { app, pickChatFile } = await startedApp();
    await emit('menu-action', 'toggle-sidebar');
    expect(app.el.classList.contains('sidebar-hidden')).toBe(true);
    await emit('menu-action', 'toggle-sidebar');
    expect(app.el.classList.contains('sidebar-hidden')).toBe(false);

    await emit('menu-action', 'search');
    expect(document.activeElement?.getAttribute('data-testid')).toBe('chat-search');

    await emit('menu-action', 'import-chat');
    await settle();
    expect(pickChatFile).toHaveBeenCalledTimes(1);

    // no chat is open: Export says so instead of doing nothing
    await emit('menu-action', 'export-chat');
    expect([...app.el.querySelectorAll('[data-testid=toast]')].map((t) => t.textContent)).toContain('Open a chat to export it.');

    await emit('menu-action', 'settings');
    expect(app.el.querySelector('[data-testid=settings-page]')).not.toBeNull();
  });
});

describe('files opened with the app', () => {
  it('start a chat with them, at start and while running, each taken once', async () => {
    const { calls } = await startedApp(['/photos/cat.png']);
    await settle();
    const attached = () => calls.filter((c) => c.cmd === 'add_attachment_path').map((c) => (c.args as { path: string }).path);
    expect(attached()).toEqual(['/photos/cat.png']);
    expect(document.querySelectorAll('[data-testid=composer-thumb]').length).toBe(1);
    // while running (macOS: a drop on the Dock icon): the event says files wait
    await emit('files-opened', null);
    await settle();
    expect(attached()).toEqual(['/photos/cat.png']);
  });
});
