// The chat list by keyboard (issue 29): one Tab stop for the whole list
// (each chat used to take three: the chat, rename, delete), arrow keys move
// between chats, F2 and Delete act on the focused one.
import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { Sidebar } from './sidebar';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const chats = [1, 2, 3].map((id) => ({ id, title: `Chat ${id}`, model: null, created_at: 0, updated_at: Date.now(), answer_format: null, settings: null }));

async function sidebar(selected: number | null) {
  mockIPC((cmd) => (cmd === 'list_chats' ? chats : cmd === 'list_presets' ? [] : undefined));
  const sb = new Sidebar({ select: () => {}, selectedId: () => selected, isRunning: () => false, deleted: () => {}, toast: () => {}, startFromPreset: () => {}, importChat: () => {} });
  document.body.append(sb.el);
  await sb.refresh();
  return sb;
}

/** What Tab can land on inside the chat list. */
const tabStops = (sb: Sidebar) => [...sb.el.querySelectorAll<HTMLElement>('[data-testid=chat-list] button, [data-testid=chat-list] input')].filter((e) => e.tabIndex >= 0);

describe('the chat list by keyboard', () => {
  it('is one Tab stop: the open chat, else the first', async () => {
    let sb = await sidebar(2);
    expect(tabStops(sb).map((e) => e.closest('[data-chat-id]')!.getAttribute('data-chat-id'))).toEqual(['2']);
    document.body.innerHTML = '';
    sb = await sidebar(null);
    expect(tabStops(sb).map((e) => e.closest('[data-chat-id]')!.getAttribute('data-chat-id'))).toEqual(['1']);
    // written out, as the e2e suite finds it (a button reads tabIndex 0 without one)
    expect(sb.el.querySelectorAll('[data-testid=chat-open][tabindex="0"]').length).toBe(1);
    // rename and delete stay buttons (named, for the mouse and screen readers), out of the Tab order
    const rename = sb.el.querySelector<HTMLButtonElement>('[data-testid=rename-chat]')!;
    expect(rename.tabIndex).toBe(-1);
    expect(rename.getAttribute('aria-label')).toBe('Rename “Chat 1”');
    expect(sb.el.querySelector('[data-testid=chat-open]')!.getAttribute('aria-keyshortcuts')).toBe('F2 Delete');
  });

  it('moves between chats with the arrow keys, Home and End, the Tab stop with the focus', async () => {
    const sb = await sidebar(null);
    const opens = () => [...sb.el.querySelectorAll<HTMLButtonElement>('[data-testid=chat-open]')];
    const press = (key: string) => (document.activeElement as HTMLElement).dispatchEvent(new KeyboardEvent('keydown', { key, bubbles: true, cancelable: true }));
    opens()[0].focus();
    press('ArrowDown');
    expect(document.activeElement).toBe(opens()[1]);
    press('End');
    expect(document.activeElement).toBe(opens()[2]);
    press('ArrowDown');
    expect(document.activeElement).toBe(opens()[2]);
    press('Home');
    expect(document.activeElement).toBe(opens()[0]);
    press('ArrowDown');
    expect(tabStops(sb)).toEqual([opens()[1]]);
    // F2 on the focused chat renames it
    press('F2');
    expect(sb.el.querySelector('[data-testid=rename-input]')).not.toBeNull();
  });
});
