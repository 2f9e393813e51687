// A first message makes its chat in the same command (one round trip, and a
// refused message makes none), and the chat shows in the sidebar at Send
// (issue 29): from the record the command sends first, not from reading the
// chat list again, which waits for the answer's first piece (it would take
// the CPU from the prompt's reading) and comes in a task after the one that
// draws that piece. On a mocked backend whose reply's events the test sends.
import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import type { Channel } from '@tauri-apps/api/core';
import { App } from './app';
import type { Chat, EngineStatus, Message, StreamEvent } from './api';

afterEach(() => {
  clearMocks();
  document.body.innerHTML = '';
  localStorage.clear();
});

const tick = () => new Promise((r) => setTimeout(r, 0));
const settle = async () => { for (let i = 0; i < 8; i++) await tick(); };

const ready: EngineStatus = {
  state: 'ready', loading: null, knobs: null, error: null, idle_unloaded: null,
  model: { id: 'dir:tiny', name: 'Tiny', path: '', architecture: 'llama', quantization: null, quantization_words: null, max_context: 2048, vision: false, thinking: false, tools: false },
};
const chat = (over: Partial<Chat> = {}): Chat => ({ id: 7, title: '', created_at: 1, updated_at: 1, settings: null, answer_format: null, ...over } as Chat);
const userMessage = { id: 70, chat_id: 7, parent_id: null, role: 'user', content: 'Hello there', attachments: [], siblings: [70] } as unknown as Message;

/** The app on a backend where Send makes chat 7 (or refuses the message);
 * the test sends the reply's events and ends the command. */
async function appSending(refuse = false) {
  const calls: { cmd: string; args: unknown }[] = [];
  let stored: Chat[] = [];
  let reply: Channel<StreamEvent> | null = null;
  let endSend: () => void = () => {};
  mockIPC((cmd, args) => {
    calls.push({ cmd, args });
    switch (cmd) {
      case 'engine_status': return ready;
      case 'server_status': return { running: false, url: null, error: null };
      case 'get_settings': return { settings: { thinking: true }, restart_needed: false, notes: [] };
      case 'list_chats': return stored;
      case 'send_message':
        if (refuse) throw { code: 'MODEL_CANNOT_SEE_IMAGES', message: 'Tiny cannot see images.' };
        reply = (args as { onEvent: Channel<StreamEvent> }).onEvent;
        stored = [chat({ title: 'Hello there' })];
        return new Promise((resolve) => { endSend = () => resolve({ user: userMessage, reply: { reply_id: 71, model: 'Tiny' } }); });
      case 'list_models': return { catalog: [], local: [], models_dir: '/m', hf_cache_dir: '/hf', disk_bytes: 0 };
      case 'list_messages': case 'active_replies': case 'list_presets': case 'take_opened_files': case 'list_bulk_jobs': return [];
      default: return null;
    }
  }, { shouldMockEvents: true });
  const platform = {
    pickFiles: async () => [], pickChatFile: async () => null, pickExportFolder: async () => null, pickModel: async () => null,
    onDrop: () => {},
  };
  const app = new App(platform);
  document.body.append(app.el);
  await app.start();
  let index = 0;
  const internals = (window as unknown as { __TAURI_INTERNALS__: { runCallback(id: number, data: unknown): void } }).__TAURI_INTERNALS__;
  // what the app's Channel sends: each message with its place in the stream
  const event = (e: StreamEvent) => internals.runCallback(reply!.id, { index: index++, message: e });
  const count = (cmd: string) => calls.filter((c) => c.cmd === cmd).length;
  return { app, calls, count, event, endSend: () => endSend() };
}

const liveAnswer = () => document.querySelector('[data-testid="msg-live"] [data-testid="answer"]')?.textContent?.trim();

const sidebarChats = (app: App) => [...app.el.querySelectorAll<HTMLElement>('[data-testid=chat-item]')]
  .map((e) => `${e.dataset.chatId} ${e.querySelector('.chat-title')?.textContent}`);

function typeAndSend(app: App, text: string) {
  app.el.querySelector<HTMLTextAreaElement>('[data-testid=composer-input]')!.value = text;
  app.el.querySelector<HTMLButtonElement>('[data-testid=send]')!.click();
}

describe('a first message', () => {
  it('makes its chat in the send command, listed at Send; the list is read again at its first piece', async () => {
    const { app, calls, count, event, endSend } = await appSending();
    expect(sidebarChats(app)).toEqual([]);
    const listsBefore = count('list_chats');
    typeAndSend(app, 'Hello there');
    await settle();
    // one command: no chat is made before it
    expect(count('create_chat')).toBe(0);
    expect(calls.find((c) => c.cmd === 'send_message')?.args).toMatchObject({ chatId: null, newChat: null, message: { text: 'Hello there', attachments: [] } });
    event({ kind: 'chat_created', chat: chat() });
    event({ kind: 'started', chat_id: 7, reply_id: 71, model: 'Tiny' });
    endSend();
    await settle();
    // there while the prompt is read, from the record the command sent
    expect(sidebarChats(app)).toEqual(['7 New chat']);
    expect(app.el.querySelector('[data-testid=chat-open][aria-current=page]')?.closest('[data-chat-id]')?.getAttribute('data-chat-id')).toBe('7');
    expect(count('list_chats')).toBe(listsBefore);
    expect(app.el.querySelectorAll('[data-testid=msg-user]').length).toBe(1);
    // the first piece: the list (with the title the message gave) is read
    // then, in a task after the one that draws the piece (its commands are
    // not on the text's way)
    event({ kind: 'content', text: 'Hi' });
    expect(liveAnswer()).toBe('Hi');
    expect(count('list_chats')).toBe(listsBefore);
    await settle();
    expect(count('list_chats')).toBeGreaterThan(listsBefore);
    expect(sidebarChats(app)).toEqual(['7 Hello there']);
  });

  it('draws nothing of Send until the reply has started and the command has answered, then all in one task', async () => {
    const { app, event, endSend } = await appSending();
    const box = app.el.querySelector<HTMLTextAreaElement>('[data-testid=composer-input]')!;
    const tasks: number[] = [];
    const observer = new MutationObserver((records) => tasks.push(records.length));
    typeAndSend(app, 'Hello there');
    observer.observe(app.el, { subtree: true, childList: true, attributes: true, characterData: true });
    await settle();
    event({ kind: 'chat_created', chat: chat() });
    event({ kind: 'started', chat_id: 7, reply_id: 71, model: 'Tiny' });
    await settle();
    // the chat is made and its reply started, and nothing of it is drawn yet
    expect(tasks).toEqual([]);
    expect(sidebarChats(app)).toEqual([]);
    expect(box.value).toBe('Hello there');
    expect(app.el.querySelector('[data-testid=msg-live]')).toBeNull();

    endSend();
    await settle();
    observer.disconnect();
    expect(tasks.length).toBe(1);
    expect(sidebarChats(app)).toEqual(['7 New chat']);
    expect(box.value).toBe('');
    expect(app.el.querySelectorAll('[data-testid=msg-user]').length).toBe(1);
    expect(app.el.querySelector<HTMLElement>('[data-testid=msg-live]')?.dataset.id).toBe('71');
    expect(app.el.querySelector('[data-testid=empty-chat]')).toBeNull();
  });

  it('refused, leaves no chat and keeps its text in the box', async () => {
    const { app, count } = await appSending(true);
    typeAndSend(app, 'What is in this picture?');
    await settle();
    expect(count('send_message')).toBe(1);
    expect(sidebarChats(app)).toEqual([]);
    expect(app.el.querySelector<HTMLTextAreaElement>('[data-testid=composer-input]')!.value).toBe('What is in this picture?');
    expect([...app.el.querySelectorAll('[data-testid=toast]')].map((t) => t.textContent)).toContain('Tiny cannot see images.');
  });
});
