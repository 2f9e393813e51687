// Settings → Local OpenAI server → API key against the app's commands
// (mocked IPC): a masked field, the key sent once and never shown back,
// the server's state asked again after a save, and failures said in place.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import type { ServerKeyView } from './api';
import { ServerKeySection } from './serverKeySection';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const none: ServerKeyView = { set: false, masked: null, error: null };
const q = <T extends Element>(root: Element, id: string) => root.querySelector<T>(`[data-testid=${id}]`);

describe('the local server API key in Settings', () => {
  it('saves a typed key from a masked field, shows only its end, then removes it', async () => {
    const calls: [string, unknown][] = [];
    let view = none;
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      if (cmd === 'server_api_key_status') return view;
      if (cmd === 'save_server_api_key') { view = { set: true, masked: '…WXYZ', error: null }; return view; }
      if (cmd === 'remove_server_api_key') { view = none; return view; }
    });
    const changed = vi.fn();
    const section = new ServerKeySection(changed);
    document.body.append(section.el);
    await section.refresh();
    expect(q(section.el, 'server-key-state')!.textContent).toMatch(/No key/);
    expect(q<HTMLButtonElement>(section.el, 'server-key-remove')!.hidden).toBe(true);

    const input = q<HTMLInputElement>(section.el, 'server-key-input')!;
    expect(input.type).toBe('password');
    input.value = 'local-secret-key-WXYZ';
    await section.refresh();
    expect(input.value, 'a redraw keeps a key being typed').toBe('local-secret-key-WXYZ');
    q<HTMLButtonElement>(section.el, 'server-key-save')!.click();
    await vi.waitFor(() => expect(q(section.el, 'server-key-masked')?.textContent).toBe('…WXYZ'));
    expect(calls.find(([c]) => c === 'save_server_api_key')?.[1]).toEqual({ key: 'local-secret-key-WXYZ' });
    expect(input.value, 'the field keeps no copy once saved').toBe('');
    expect(section.el.innerHTML).not.toContain('local-secret');
    expect(changed).toHaveBeenCalledTimes(1);

    q<HTMLButtonElement>(section.el, 'server-key-remove')!.click();
    await vi.waitFor(() => expect(q(section.el, 'server-key-masked')).toBeNull());
    expect(q(section.el, 'server-key-state')!.textContent).toMatch(/No key/);
    expect(changed).toHaveBeenCalledTimes(2);
  });

  it('refuses an empty key before asking the app, and says a refused key in place', async () => {
    const calls: string[] = [];
    mockIPC((cmd) => {
      calls.push(cmd);
      if (cmd === 'server_api_key_status') return none;
      if (cmd === 'save_server_api_key') throw { code: 'INVALID_API_KEY', message: 'not a usable API key: the key contains \' \'' };
    });
    const section = new ServerKeySection();
    document.body.append(section.el);
    await section.refresh();
    q<HTMLButtonElement>(section.el, 'server-key-save')!.click();
    expect(q(section.el, 'server-key-error')!.textContent).toMatch(/Type a key first/);
    expect(calls).not.toContain('save_server_api_key');

    q<HTMLInputElement>(section.el, 'server-key-input')!.value = 'two words';
    q<HTMLButtonElement>(section.el, 'server-key-save')!.click();
    await vi.waitFor(() => expect(q(section.el, 'server-key-error')!.textContent).toMatch(/not a usable API key/));
  });
});
