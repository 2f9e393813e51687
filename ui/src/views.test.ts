import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { friendlyError, statsLine, ChatView, type ModelState } from './chatView';
import { statusItems } from './statusBar';
import { Composer } from './composer';
import { readForm } from './chatSettingsView';
import { ModelsView } from './modelsView';
import { Sidebar } from './sidebar';
import type { Chat, LoadedModel, Message } from './api';

afterEach(() => clearMocks());

const noHooks = { regenerate: () => {}, edit: () => {}, continueReply: () => {}, sendStarter: () => {}, openModels: () => {}, switchBranch: () => {}, deleteBranch: () => {} };
const loaded = (vision: boolean, over: Partial<LoadedModel> = {}): LoadedModel => ({
  id: 'x', name: vision ? 'Tiny VL' : 'Tiny', path: '', architecture: 'llama', quantization: null, quantization_words: null, max_context: 1, vision, thinking: false, tools: false, ...over,
});
const ready = (vision: boolean): ModelState => ({ state: 'ready', model: loaded(vision) });

const msg = (over: Partial<Message>): Message => ({
  id: 1, chat_id: 1, parent_id: null, siblings: [], role: 'user', content: '', reasoning: null, attachments: [], stats: null, model: null,
  status: 'complete', error: null, error_code: null, created_at: 0, updated_at: 0, tool_calls: [], tool_result: null, ...over,
});

describe('message details', () => {
  it('formats per-message stats', () => {
    expect(statsLine({ completion_tokens: 42, tokens_per_second: 31.46, ttft_ms: 120.4, finish_reason: 'stop' }))
      .toBe('42 tokens · 31.5 tok/s · TTFT 120 ms · ended: stop');
    expect(statsLine({ completion_tokens: 3, prompt_tokens: 120, cached_prompt_tokens: 100, kv_cache_bytes: 2_450_000 }))
      .toBe('3 tokens · prompt 120 tokens (100 cached) · KV 2.5 MB');
    expect(statsLine({ prompt_tokens: 4100, cached_prompt_tokens: 4080, cached_from_disk_tokens: 4080 }))
      .toBe('prompt 4100 tokens (4080 cached, reused 4080 tokens from disk)');
    expect(statsLine(null)).toBe('');
  });

  it('explains a failure by its code, not by its wording', () => {
    const textModel = { modelSeesImages: false, imagesInChat: true };
    const refused = 'invalid request: the model tiny does not accept images (it has no vision tower)';
    expect(friendlyError('INVALID_REQUEST', refused, textModel)).toMatch(/^This model cannot see images\..*no vision tower/);
    // the same code for other reasons: a vision model, no image in the chat, or no model loaded
    expect(friendlyError('INVALID_REQUEST', 'bad top_p', { modelSeesImages: true, imagesInChat: true })).toBe('bad top_p');
    expect(friendlyError('INVALID_REQUEST', 'bad top_p', { modelSeesImages: false, imagesInChat: false })).toBe('bad top_p');
    expect(friendlyError('INVALID_REQUEST', refused, { modelSeesImages: null, imagesInChat: true })).toBe(refused);
    // a bad image on a vision model is the image's fault, not the model's
    const bad = friendlyError('INVALID_IMAGE', 'invalid image #1: not a PNG', { modelSeesImages: true, imagesInChat: true });
    expect(bad).toMatch(/^This image could not be read\..*not a PNG/);
    expect(bad).not.toMatch(/cannot see images/);
    // no code (a reply stored before codes were kept): the message as it is, whatever it says
    expect(friendlyError(null, 'this model does not support images', textModel)).toBe('this model does not support images');
    expect(friendlyError('ENGINE_STOPPED', 'x', textModel)).toMatch(/unloaded or restarted/);
  });

  it('says a text-only model cannot see the chat\'s image, and stops saying it once a vision model is loaded', () => {
    const view = new ChatView(noHooks);
    const image = { sha256: 'a'.repeat(64), mime: 'image/png', size: 1, path: '/a.png' };
    const refused = 'invalid request: the model tiny does not accept images';
    view.setModel(ready(false));
    view.show([
      msg({ id: 1, role: 'user', content: 'What is this?', attachments: [image] }),
      msg({ id: 2, role: 'assistant', status: 'error', error: refused, error_code: 'INVALID_REQUEST' }),
    ], null);
    const error = () => view.el.querySelector('[data-testid=reply-error]')!;
    expect(error().textContent).toMatch(/cannot see images/);
    expect(error().getAttribute('data-code')).toBe('INVALID_REQUEST');
    view.setModel(ready(true));
    expect(error().textContent).toBe(refused);
  });

  it('shows thinking apart from the answer, and the error of a failed reply', () => {
    const view = new ChatView(noHooks);
    view.show([
      msg({ id: 1, role: 'user', content: 'Q' }),
      msg({ id: 2, role: 'assistant', content: 'The **answer**', reasoning: 'Let me think', stats: { completion_tokens: 3 } }),
      msg({ id: 3, role: 'user', content: 'Q2' }),
      msg({ id: 4, role: 'assistant', status: 'error', error: 'context length exceeded: the prompt has 9 tokens', error_code: 'CONTEXT_LENGTH_EXCEEDED' }),
    ], null);
    const thinking = view.el.querySelector('[data-testid=thinking]')!;
    expect(thinking.textContent).toContain('Let me think');
    expect(view.el.querySelector('[data-testid=answer] strong')!.textContent).toBe('answer');
    expect(view.el.querySelector('[data-testid=reply-error]')!.textContent).toMatch(/longer than this model's context/);
    // only the last turn offers regenerate; every message you sent can be edited (a new branch)
    expect(view.el.querySelectorAll('[data-testid=regenerate]').length).toBe(1);
    expect(view.el.querySelectorAll('[data-testid=edit-message]').length).toBe(2);
    // no message has another version: no switcher, no branch delete
    expect(view.el.querySelector('[data-testid=branches]')).toBeNull();
    expect(view.el.querySelector('[data-testid=delete-branch]')).toBeNull();
  });

  it('says when earlier messages were left out to fit the context', () => {
    const view = new ChatView(noHooks);
    view.show([
      msg({ id: 1, role: 'user', content: 'Q' }),
      msg({ id: 2, role: 'assistant', content: 'A', stats: { left_out_messages: 4 } }),
    ], null);
    expect(view.el.querySelector('[data-testid=left-out-note]')!.textContent).toMatch(/^4 earlier messages were left out/);
    view.show([msg({ id: 1, role: 'user', content: 'Q' }), msg({ id: 2, role: 'assistant', content: 'A', stats: {} })], null);
    expect(view.el.querySelector('[data-testid=left-out-note]')).toBeNull();
  });

  it('shows ‹ 2/3 › on a message with other versions and switches to its neighbours', () => {
    const chosen: number[] = [];
    const view = new ChatView({ ...noHooks, switchBranch: (id) => chosen.push(id) });
    view.show([
      msg({ id: 1, role: 'user', content: 'Q', siblings: [1] }),
      msg({ id: 5, parent_id: 1, role: 'assistant', content: 'second try', siblings: [2, 5, 9] }),
    ], null);
    const answer = view.el.querySelector('[data-testid=msg-assistant]')!;
    expect(answer.querySelector('[data-testid=branch-position]')!.textContent).toBe('2/3');
    (answer.querySelector('[data-testid=branch-prev]') as HTMLButtonElement).click();
    (answer.querySelector('[data-testid=branch-next]') as HTMLButtonElement).click();
    expect(chosen).toEqual([2, 9]);
    expect(answer.querySelector('[data-testid=delete-branch]')).not.toBeNull();
    // the user message has one version: no switcher there
    expect(view.el.querySelector('[data-testid=msg-user] [data-testid=branches]')).toBeNull();
  });
});

describe('status bar', () => {
  it('says what the engine does in words a user knows', () => {
    const status = { state: 'ready' as const, loading: null, model: loaded(false), knobs: null, error: null, idle_unloaded: null };
    const engine = { running: 2, waiting: 1, kv_cache_bytes: 2_500_000, active_memory_bytes: 180_000_000, decode_steps: 9, kv_quantization: 'off',
      prefix_cache: { hits: 3, misses: 1, bytes: 0, reused_tokens: 340 } };
    const items = statusItems(status, { engine, decode_tps: 14.2, app_replies: 2 }, { running: true, url: 'http://127.0.0.1:8080/v1', error: null });
    expect(items).toEqual(['Tiny', '2 answering', '1 waiting', '14 tok/s', 'memory 180 MB', 'cache reused 340 tokens', 'API http://127.0.0.1:8080/v1']);
    // nothing running: no speed, no waiting count, "idle"
    const idle = statusItems(status, { engine: { ...engine, running: 0, waiting: 0 }, decode_tps: 0, app_replies: 0 }, null);
    expect(idle).toEqual(['Tiny', 'idle', 'memory 180 MB', 'cache reused 340 tokens']);
    const disk = { ...engine.prefix_cache, disk: { hits: 1, reused_tokens: 300, entries: 2, bytes: 1, capacity_bytes: 2, rejected_files: 0 } };
    expect(statusItems(status, { engine: { ...engine, prefix_cache: disk }, decode_tps: 0, app_replies: 0 }, null))
      .toContain('cache reused 340 tokens (300 from disk)');
    const withVision = statusItems(status, { engine: { ...engine, vision_cache: { hits: 3, misses: 1, bytes: 0, entries: 1 } }, decode_tps: 0, app_replies: 0 }, null);
    expect(withVision).toContain('images read 1 · reused 3');
    // a text model's unused vision cache is noise; a vision model's is news even at zero
    const unused = { engine: { ...engine, vision_cache: { hits: 0, misses: 0, bytes: 0, entries: 0 } }, decode_tps: 0, app_replies: 0 };
    expect(statusItems(status, unused, null).some((i) => i.startsWith('images'))).toBe(false);
    const vl = { ...status, model: loaded(true) };
    expect(statusItems(vl, unused, null)).toContain('images read 0 · reused 0');
  });
});

describe('models page', () => {
  it('marks the models on disk that can see images', async () => {
    const local = (id: string, vision: boolean) => ({
      id, name: id, path: `/m/${id}`, format: 'folder', size_bytes: 1, architecture: vision ? 'qwen2_vl' : 'llama',
      supported: true, partial: false, error: null, location: { kind: 'models_dir' }, vision,
    });
    mockIPC((cmd) => {
      if (cmd === 'list_models') return { catalog: [], local: [local('dir:text', false), local('dir:sees', true)], models_dir: '/m', hf_cache_dir: null, disk_bytes: 2 };
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    const badge = (id: string) => view.el.querySelector(`[data-model-id="${id}"] [data-testid=vision-badge]`);
    expect(badge('dir:sees')?.textContent).toBe('Vision');
    expect(badge('dir:text')).toBeNull();
    view.el.remove();
  });
});

const composerHooks = {
  send: async (_m: unknown, shown: () => void) => { shown(); return true; }, stop: () => {}, pickFiles: async () => [], toast: () => {},
  visionModels: async () => [], switchModel: async () => {}, openModels: () => {}, setAnswerFormat: async () => true, setThinking: async () => {},
};

describe('composer', () => {
  it('sends on Enter, keeps Shift+Enter as a newline, and clears after sending', async () => {
    const sent: unknown[] = [];
    const c = new Composer({ ...composerHooks, send: async (m, shown) => { sent.push(m); shown(); return true; } });
    document.body.append(c.el);
    c.input.value = 'line one';
    c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', shiftKey: true, bubbles: true }));
    expect(sent).toEqual([]);
    c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    await vi.waitFor(() => expect(sent).toEqual([{ text: 'line one', attachments: [] }]));
    await vi.waitFor(() => expect(c.input.value).toBe(''));
    c.el.remove();
  });

  it('empties the box as the message is drawn, sends it once, and keeps it when sending fails', async () => {
    const sent: unknown[] = [];
    let drawn: () => void = () => {};
    let end: (ok: boolean) => void = () => {};
    const c = new Composer({ ...composerHooks, send: (m, shown) => { sent.push(m); drawn = shown; return new Promise((r) => { end = r; }); } });
    document.body.append(c.el);
    const enter = () => c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    c.input.value = 'first';
    enter();
    await vi.waitFor(() => expect(sent).toHaveLength(1));
    // on its way, not drawn yet: the text stays, and Enter again sends nothing
    expect(c.input.value).toBe('first');
    enter();
    drawn();
    expect(c.input.value).toBe('');
    end(true);
    await Promise.resolve();
    expect(sent).toHaveLength(1);

    c.input.value = 'second';
    enter();
    await vi.waitFor(() => expect(sent).toHaveLength(2));
    end(false); // refused before it was drawn
    await vi.waitFor(() => expect(c.input.value).toBe('second'));
    enter();
    await vi.waitFor(() => expect(sent).toHaveLength(3));
    c.el.remove();
  });

  it('shows dropped images as removable thumbnails and sends their hashes', async () => {
    mockIPC((cmd, args) => {
      if (cmd === 'add_attachment_path') {
        const path = (args as { path: string }).path;
        return { sha256: path === '/a.png' ? 'a'.repeat(64) : 'b'.repeat(64), mime: 'image/png', size: 1, path };
      }
    });
    const sent: { attachments: string[] }[] = [];
    const c = new Composer({ ...composerHooks, send: async (m, shown) => { sent.push(m); shown(); return true; } });
    await c.addPaths(['/a.png', '/b.png']);
    expect(c.el.querySelectorAll('[data-testid=composer-thumb]').length).toBe(2);
    c.el.querySelector<HTMLButtonElement>('[data-sha="' + 'a'.repeat(64) + '"] [data-testid=remove-thumb]')!.click();
    expect(c.el.querySelectorAll('[data-testid=composer-thumb]').length).toBe(1);
    c.el.querySelector<HTMLButtonElement>('[data-testid=send]')!.click();
    await vi.waitFor(() => expect(sent).toEqual([{ text: '', attachments: ['b'.repeat(64)] }]));
  });
});

describe('sidebar', () => {
  it('offers a new chat from a preset only when there are presets', async () => {
    let presets: { id: number; name: string; settings: object; answer_format: null }[] = [];
    mockIPC((cmd) => (cmd === 'list_chats' ? [] : cmd === 'list_presets' ? presets : undefined));
    const started: number[] = [];
    const sb = new Sidebar({ select: () => {}, selectedId: () => null, isRunning: () => false, deleted: () => {}, toast: () => {}, startFromPreset: (id) => started.push(id), importChat: () => {} });
    await sb.refresh();
    const select = sb.el.querySelector<HTMLSelectElement>('[data-testid=new-from-preset]')!;
    expect(select.hidden).toBe(true);
    presets = [{ id: 4, name: 'Terse', settings: { temperature: 0 }, answer_format: null }];
    await sb.refresh();
    expect(select.hidden).toBe(false);
    select.value = '4';
    select.dispatchEvent(new Event('change'));
    expect(started).toEqual([4]);
    expect(select.value).toBe('');
  });

  it('reads a chat settings form: empty fields are left to Settings', () => {
    const form = document.createElement('div');
    form.innerHTML = '<textarea name="system_prompt">Be terse.</textarea><select name="thinking"><option value="">x</option><option value="off" selected>Off</option></select>'
      + '<input name="temperature" value="0.2"><input name="top_p" value=""><select name="context_policy"><option value="rolling_window" selected>r</option></select>';
    expect(readForm(form)).toEqual({ system_prompt: 'Be terse.', thinking: false, temperature: 0.2, context_policy: 'rolling_window' });
  });

  it('lists chats and deletes one only after confirmation', async () => {
    let chats: Chat[] = [
      { id: 2, title: 'Newest', model: null, created_at: 0, updated_at: Date.now(), answer_format: null, settings: null },
      { id: 1, title: 'Older', model: null, created_at: 0, updated_at: Date.now() - 7_200_000, answer_format: null, settings: null },
    ];
    const deleted: number[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'list_chats') return chats;
      if (cmd === 'delete_chat') { const id = (args as { chatId: number }).chatId; deleted.push(id); chats = chats.filter((c) => c.id !== id); }
    });
    const sb = new Sidebar({ select: () => {}, selectedId: () => null, isRunning: (id) => id === 2, deleted: () => {}, toast: () => {}, startFromPreset: () => {}, importChat: () => {} });
    document.body.append(sb.el);
    await sb.refresh();
    const titles = [...sb.el.querySelectorAll('.chat-title')].map((e) => e.textContent);
    expect(titles).toEqual(['Newest', 'Older']);
    expect(sb.el.querySelector('[data-chat-id="2"] .busy-dot')).not.toBeNull();

    sb.el.querySelector<HTMLButtonElement>('[data-chat-id="1"] [data-testid=delete-chat]')!.click();
    document.querySelector<HTMLButtonElement>('[data-testid=confirm-cancel]')!.click();
    await Promise.resolve();
    expect(deleted).toEqual([]);
    sb.el.querySelector<HTMLButtonElement>('[data-chat-id="1"] [data-testid=delete-chat]')!.click();
    document.querySelector<HTMLButtonElement>('[data-testid=confirm-ok]')!.click();
    await vi.waitFor(() => expect(deleted).toEqual([1]));
    await vi.waitFor(() => expect(sb.el.querySelectorAll('[data-testid=chat-item]').length).toBe(1));
    sb.el.remove();
  });
});
