// The rough edges a new user met in the first hour (issue 14), as the views
// show them: what an empty chat suggests, a cut reply's Continue, images and
// a text-only model, the models page, settings that save themselves.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { ChatView, type ModelState } from './chatView';
import { Composer } from './composer';
import { downloadErrorText } from './downloadErrors';
import { ModelsView, quantizationWords } from './modelsView';
import { ENGINE, GENERATION, SettingsPage } from './settingsView';
import { Sidebar } from './sidebar';
import { startersFor } from './starters';
import type { EngineStatus, LoadedModel, Message, Settings } from './api';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const model = (over: Partial<LoadedModel> = {}): LoadedModel => ({
  id: 'dir:tiny', name: 'Tiny', path: '', architecture: 'llama', quantization: null, quantization_words: null, max_context: 2048, vision: false, thinking: false, tools: false, ...over,
});
const status = (m: LoadedModel | null): EngineStatus => ({ state: m ? 'ready' : 'unloaded', loading: null, model: m, knobs: null, error: null, idle_unloaded: null });
const msg = (over: Partial<Message>): Message => ({
  id: 1, chat_id: 1, parent_id: null, siblings: [], role: 'user', content: '', reasoning: null, attachments: [], stats: null, model: null,
  status: 'complete', error: null, error_code: null, created_at: 0, updated_at: 0, tool_calls: [], tool_result: null, ...over,
});
const image = { sha256: 'a'.repeat(64), mime: 'image/png', size: 1, path: '/a.png' };

function chatView() {
  const calls: string[] = [];
  const view = new ChatView({
    regenerate: () => calls.push('regenerate'), edit: () => calls.push('edit'), continueReply: () => calls.push('continue'),
    sendStarter: (t) => calls.push(`starter:${t}`), openModels: () => calls.push('models'),
    switchBranch: (id) => calls.push(`branch:${id}`), deleteBranch: (m) => calls.push(`delete:${m.id}`),
  });
  return { view, calls };
}

describe('the empty chat', () => {
  it('says when no model is loaded and links to Models', () => {
    const { view, calls } = chatView();
    view.setModel({ state: 'unloaded' });
    view.show([], null);
    expect(view.el.querySelector('[data-testid=empty-chat]')!.textContent).toMatch(/No model is loaded/);
    view.el.querySelector<HTMLButtonElement>('[data-testid=empty-open-models]')!.click();
    expect(calls).toEqual(['models']);
  });

  it('suggests prompts for the loaded model; a vision model is asked about an image', () => {
    const { view, calls } = chatView();
    view.setModel({ state: 'ready', model: model() });
    view.show([], null);
    const starters = [...view.el.querySelectorAll<HTMLButtonElement>('[data-testid=starter]')];
    expect(starters.length).toBeGreaterThanOrEqual(3);
    starters[0].click();
    expect(calls).toEqual([`starter:${starters[0].textContent}`]);
    expect(view.el.querySelector('[data-testid=empty-hint]')!.textContent).toMatch(/Tiny reads text/);
    view.setModel({ state: 'ready', model: model({ name: 'Tiny VL', vision: true }) });
    expect(view.el.querySelector('[data-testid=empty-hint]')!.textContent).toMatch(/drop an image .* and ask about it/);
    expect(startersFor(model({ thinking: true })).hint).toMatch(/thinks/);
  });
});

describe('a reply cut at the token limit', () => {
  it('says so under the reply and offers Continue on the last one', () => {
    const { view, calls } = chatView();
    const cut = { completion_tokens: 64, finish_reason: 'length' };
    view.show([
      msg({ id: 1, content: 'Q' }), msg({ id: 2, role: 'assistant', content: 'A long', stats: cut }),
      msg({ id: 3, content: 'Q2' }), msg({ id: 4, role: 'assistant', content: 'Another long', stats: cut }),
    ], null);
    const notes = view.el.querySelectorAll('[data-testid=cut-note]');
    expect(notes.length).toBe(2);
    expect(notes[1].textContent).toMatch(/limit of 64 tokens \(Max tokens per answer, in Settings\)/);
    expect(view.el.querySelectorAll('[data-testid=continue]').length).toBe(1);
    view.el.querySelector<HTMLButtonElement>('[data-testid=continue]')!.click();
    expect(calls).toEqual(['continue']);
    // a chat with its own answer length names that setting
    view.ownMaxTokens = true;
    view.show([msg({ id: 1, content: 'Q' }), msg({ id: 2, role: 'assistant', content: 'A long', stats: cut })], null);
    expect(view.el.querySelector('[data-testid=cut-note]')!.textContent).toMatch(/in this chat’s settings/);
    view.ownMaxTokens = false;
    // a reply that ended by itself has no such note
    view.show([msg({ id: 1, content: 'Q' }), msg({ id: 2, role: 'assistant', content: 'Done.', stats: { finish_reason: 'stop' } })], null);
    expect(view.el.querySelector('[data-testid=cut-note]')).toBeNull();
  });

  it('keeps the last turn’s actions visible (class last) and only there', () => {
    const { view } = chatView();
    view.show([msg({ id: 1, content: 'Q' }), msg({ id: 2, role: 'assistant', content: 'A' }), msg({ id: 3, content: 'Q2' }), msg({ id: 4, role: 'assistant', content: 'B' })], null);
    const last = [...view.el.querySelectorAll('.msg.last')].map((e) => e.getAttribute('data-id'));
    expect(last).toEqual(['3', '4']);
  });
});

describe('images and a model that cannot see them', () => {
  it('the chat says once that earlier images are left out', () => {
    const { view } = chatView();
    view.setModel({ state: 'ready', model: model() });
    view.show([
      msg({ id: 1, content: 'What is this?', attachments: [image] }), msg({ id: 2, role: 'assistant', content: 'x' }),
      msg({ id: 3, content: 'And this?', attachments: [image] }), msg({ id: 4, role: 'assistant', content: 'y' }),
    ], null);
    const notes = view.el.querySelectorAll('[data-testid=images-left-out]');
    expect(notes.length).toBe(1);
    expect(notes[0].textContent).toMatch(/Tiny cannot see images/);
    view.setModel({ state: 'ready', model: model({ vision: true }) } as ModelState);
    expect(view.el.querySelector('[data-testid=images-left-out]')).toBeNull();
  });

  it('the composer refuses a new message with images before sending, and offers a model that sees them', async () => {
    mockIPC((cmd, args) => {
      if (cmd === 'add_attachment_path') return { ...image, path: (args as { path: string }).path };
    });
    const sent: unknown[] = [];
    const switched: string[] = [];
    const c = new Composer({
      send: async (m) => { sent.push(m); return true; }, stop: () => {}, pickFiles: async () => [], toast: () => {},
      visionModels: async () => [{ id: 'hf:e2e/VL', name: 'e2e/VL' }], switchModel: async (id) => { switched.push(id); }, openModels: () => {}, setAnswerFormat: async () => true, setThinking: async () => {},
    });
    document.body.append(c.el);
    c.setModel({ name: 'Tiny', vision: false });
    expect(c.el.querySelector('[data-testid=composer-model]')!.textContent).toBe('Tiny · reads text only');
    await c.addPaths(['/a.png']);
    c.input.value = 'What is this?';
    c.el.querySelector<HTMLButtonElement>('[data-testid=send]')!.click();
    const offer = c.el.querySelector<HTMLElement>('[data-testid=vision-offer]')!;
    await vi.waitFor(() => expect(offer.hidden).toBe(false));
    expect(sent).toEqual([]);
    // nothing is lost: the text and the image stay in the box
    expect(c.input.value).toBe('What is this?');
    expect(c.el.querySelectorAll('[data-testid=composer-thumb]').length).toBe(1);
    expect(offer.textContent).toMatch(/Tiny cannot see images/);
    c.el.querySelector<HTMLButtonElement>('[data-testid=switch-vision-model]')!.click();
    expect(switched).toEqual(['hf:e2e/VL']);
    // once a model that sees images answers, the same message goes
    c.setModel({ name: 'e2e/VL', vision: true });
    expect(offer.hidden).toBe(true);
    c.el.querySelector<HTMLButtonElement>('[data-testid=send]')!.click();
    await vi.waitFor(() => expect(sent).toEqual([{ text: 'What is this?', attachments: [image.sha256] }]));
  });
});

describe('the models page', () => {
  const local = (id: string, name: string, over: object = {}) => ({
    id, name, path: `/m/${name}`, format: 'gguf', size_bytes: 1, architecture: 'llama', supported: true, partial: false, error: null,
    location: { kind: 'models_dir' }, vision: false, ...over,
  });
  const catalogEntry = (id: string, over: object = {}) => ({
    id, display_name: id, source: { kind: 'hub', repo: `o/${id}`, revision: 'main' }, size_bytes: 1, bits: 4, context_length: 1, vision: false,
    thinking: false, architecture: 'llama', supported: true, is_default: false, local_id: null, partial: false, downloading: false, ...over,
  });
  const gallery = {
    catalog: [
      catalogEntry('smol', { is_default: true, source: { kind: 'local', file: 'smol.gguf', sha256: '' }, local_id: 'dir:smol.gguf' }),
      catalogEntry('qwen', { local_id: 'hf:o/qwen' }),
      catalogEntry('big'),
    ],
    local: [local('dir:smol.gguf', 'smol.gguf'), local('hf:o/qwen', 'o/qwen'), local('dir:mine', 'mine')],
    models_dir: '/m', hf_cache_dir: null, disk_bytes: 3,
  };

  it('lists the user’s own models first and the built-in one once, last, not deletable', async () => {
    mockIPC((cmd) => (cmd === 'list_models' ? gallery : undefined));
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    view.setStatus(status(model({ id: 'dir:other', quantization: '4-bit (group 32) + 8-bit (group 32)' })));
    await view.refresh();
    expect(view.el.textContent).toContain('On this computer');
    const rows = [...view.el.querySelectorAll('[data-testid=local-model]')].map((r) => r.getAttribute('data-model-id'));
    expect(rows).toEqual(['dir:mine', 'hf:o/qwen', 'dir:smol.gguf']);
    const builtIn = view.el.querySelector('[data-model-id="dir:smol.gguf"][data-testid=local-model]')!;
    expect(builtIn.querySelector('[data-testid=built-in-badge]')).not.toBeNull();
    expect(builtIn.querySelector('[data-testid=delete-model]')).toBeNull();
    expect(view.el.querySelector('[data-model-id="dir:mine"] [data-testid=delete-model]')).not.toBeNull();
    // listed once: not again among the gallery's cards
    expect(view.el.querySelector('[data-testid=catalog-model][data-model-id=smol]')).toBeNull();
    // badges explain themselves; the quantization is said in words
    for (const b of view.el.querySelectorAll('.badge')) expect(b.getAttribute('title')).toBeTruthy();
    expect(view.el.querySelector('[data-testid=loaded-details]')!.textContent).toMatch(/^4-bit and 8-bit weights/);
  });

  it('keeps a failed download’s reason on its card, in plain words, with Retry', async () => {
    const downloads: string[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'list_models') return gallery;
      if (cmd === 'download_model') downloads.push((args as { id: string }).id);
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    view.onDone({ id: 'big', ok: false, cancelled: false, local_id: null,
      error: { code: 'NETWORK_ERROR', message: 'network error: error sending request for url (https://huggingface.co/api/models/o/big?blobs=true)' } });
    await vi.waitFor(() => expect(view.el.querySelector('[data-model-id=big] [data-testid=download-error]')).not.toBeNull());
    const card = view.el.querySelector('[data-model-id=big]')!;
    expect(card.querySelector('[data-testid=download-error]')!.textContent).toMatch(/No connection to Hugging Face/);
    expect(card.textContent).not.toMatch(/blobs=true/);
    card.querySelector<HTMLButtonElement>('[data-testid=retry-download]')!.click();
    await vi.waitFor(() => expect(downloads).toEqual(['big']));
  });

  it('says each hub failure plainly', () => {
    const say = (code: string) => downloadErrorText({ code, message: 'raw' });
    expect(say('NOT_FOUND')).toMatch(/not found/);
    expect(say('AUTH_REQUIRED')).toMatch(/gated.*token/);
    expect(say('DISK_FULL')).toMatch(/disk is full/);
    expect(say('CHECKSUM_MISMATCH')).toMatch(/checksum mismatch/);
    expect(say('SOMETHING_NEW')).toMatch(/raw/);
    expect(quantizationWords(null)).toMatch(/full precision/);
    expect(quantizationWords('4-bit (group 64)')).toBe('4-bit');
  });
});

describe('settings', () => {
  const settings: Settings = {
    thinking: true, thinking_budget: 0, context_policy: 'stop', kv_bits: 0, kv_group_size: 64, max_context: 0, vision_cache_mb: 512, prefix_disk_cache_mb: 4096, temperature: 0.7, top_p: 0.95, top_k: 0,
    min_p: 0, repetition_penalty: 1, max_tokens: 1024, system_prompt: '', max_running: 8, speed_up: 'off', unload_after_idle_minutes: 0, server_enabled: false, server_port: 8080,
    server_file_url_folders: [], cluster: { enabled: false, hostfile: '', hosts: [], join_timeout_secs: 120, split: 'auto' },
  };

  it('every field says what it does', () => {
    for (const f of [...GENERATION, ...ENGINE]) expect(f.hint.length, f.key).toBeGreaterThan(20);
  });

  it('apply each change at once, keep a half-typed one on leaving, and show Thinking only where the model thinks', async () => {
    const saved: Settings[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'get_settings') return { settings, restart_needed: false, notes: [] };
      if (cmd === 'server_status') return { running: false, url: null, error: null };
      if (cmd === 'save_settings') { const s = (args as { settings: Settings }).settings; saved.push({ ...s }); return { settings: s, restart_needed: false, notes: [] }; }
    });
    const page = new SettingsPage(() => {});
    document.body.append(page.el);
    page.setStatus(status(model({ thinking: false })));
    await page.refresh();
    const thinking = page.el.querySelector<HTMLInputElement>('[data-testid=setting-thinking]')!;
    expect(thinking.disabled).toBe(true);
    expect(page.el.querySelector('[data-testid=setting-thinking-hint]')!.textContent).toMatch(/Tiny does not think/);
    // a select saves at once
    const kv = page.el.querySelector<HTMLSelectElement>('[data-testid=setting-kv_bits]')!;
    kv.value = '8';
    kv.dispatchEvent(new Event('change'));
    await vi.waitFor(() => expect(saved.at(-1)?.kv_bits).toBe(8));
    // typing saves after a pause, or at once when the page is left
    const temp = page.el.querySelector<HTMLInputElement>('[data-testid=setting-temperature]')!;
    temp.value = '0.2';
    temp.dispatchEvent(new Event('input'));
    expect(page.el.querySelector('[data-testid=settings-saved]')!.textContent).toBe('Saving…');
    page.flush();
    await vi.waitFor(() => expect(saved.at(-1)?.temperature).toBe(0.2));
    await vi.waitFor(() => expect(page.el.querySelector('[data-testid=settings-saved]')!.textContent).toBe('Saved.'));
    // a model that thinks makes the switch available
    page.setStatus(status(model({ id: 'dir:q3', name: 'Qwen3', thinking: true })));
    await vi.waitFor(() => expect(page.el.querySelector<HTMLInputElement>('[data-testid=setting-thinking]')!.disabled).toBe(false));
  });
});

describe('the chat list by keyboard', () => {
  it('each chat is a button (Enter opens it) with its actions after it', async () => {
    mockIPC((cmd) => (cmd === 'list_chats' ? [{ id: 7, title: 'Trip', model: null, created_at: 0, updated_at: Date.now() }] : undefined));
    const opened: number[] = [];
    const sb = new Sidebar({ select: (c) => opened.push(c!.id), selectedId: () => null, isRunning: () => true, deleted: () => {}, toast: () => {}, startFromPreset: () => {}, importChat: () => {} });
    document.body.append(sb.el);
    await sb.refresh();
    const open = sb.el.querySelector<HTMLButtonElement>('[data-testid=chat-open]')!;
    expect(open.tagName).toBe('BUTTON');
    open.click(); // what Enter on a focused button does
    expect(opened).toEqual([7]);
    expect(sb.el.querySelector('[data-testid=chat-time]')!.textContent).toBe('answering…');
    // no button inside a button (screen readers and axe: nested-interactive)
    expect(open.querySelector('button')).toBeNull();
    expect(sb.el.querySelector('[data-testid=rename-chat]')!.getAttribute('aria-label')).toBe('Rename “Trip”');
  });
});
