// Issue 29's Models items as the window shows them, on a mocked backend:
// "My models" before the catalog, a catalog model on disk offered as Load,
// each card marked by its fit and the best fit marked, "Add model…" and a
// dropped folder going to the models flow (never to the chat), a first
// launch with no model suggesting the best fit, and one reading of the
// engine's status for the header, the status bar and the composer.
import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { emit } from '@tauri-apps/api/event';
import { App } from './app';
import { ModelsView } from './modelsView';
import { bestFit } from './recommend';
import { headerLabel, modelView, statusLabel } from './modelState';
import { statusItems } from './statusBar';
import type { CatalogEntry, EngineStatus, FitCheck, LoadedModel } from './api';
import type { FitLevel } from './bindings/FitLevel';

afterEach(() => {
  clearMocks();
  document.body.innerHTML = '';
  localStorage.clear();
});

const tick = () => new Promise((r) => setTimeout(r, 0));
const settle = async () => { for (let i = 0; i < 8; i++) await tick(); };

const loaded = (over: Partial<LoadedModel> = {}): LoadedModel => ({
  id: 'dir:tiny', name: 'Tiny', path: '', architecture: 'llama', quantization: null, quantization_words: null, max_context: 2048,
  vision: false, thinking: false, tools: false, ...over,
});
const status = (over: Partial<EngineStatus> = {}): EngineStatus => ({
  state: 'unloaded', loading: null, model: null, knobs: null, error: null, idle_unloaded: null, ...over,
});
const entry = (id: string, size: number, over: Partial<CatalogEntry> = {}): CatalogEntry => ({
  id, display_name: `Model ${id}`, source: { kind: 'hub', repo: `org/${id}`, revision: 'main' }, size_bytes: size, bits: 4,
  context_length: 8192, vision: true, thinking: false, architecture: 'llama', supported: true, is_default: false,
  local_id: null, partial: false, downloading: false, ...over,
});
const fit = (level: FitLevel): FitCheck => {
  const estimate = { weights: 1e9, kv_cache: 3e8, vision: 0, overhead: 3e8, total: 1.6e9 };
  return {
    variant: null, level, estimate, settings: { context: 8192, kv_bits: null, sequences: 1 }, limit_bytes: 24e9, available_bytes: 20e9,
    max_green_context: 8192, summary: `a chat needs about 1.6 GB`,
    worst: { level: 'yellow', estimate: { ...estimate, total: 11.3e9 }, settings: { context: 32768, kv_bits: null, sequences: 8 } },
  };
};

describe('the best fit', () => {
  it('is the largest green catalog model, one that sees images on a tie', () => {
    const catalog = [entry('small', 1e9), entry('mid', 3e9, { vision: false }), entry('mid-vl', 3e9), entry('big', 9e9), entry('local', 5e9, { source: { kind: 'local', file: 'x.gguf', sha256: '' } })];
    const fits = new Map([['small', fit('green')], ['mid', fit('green')], ['mid-vl', fit('green')], ['big', fit('yellow')], ['local', fit('green')]]);
    expect(bestFit(catalog, fits)?.id).toBe('mid-vl');
    expect(bestFit(catalog, new Map([['big', fit('red')]]))).toBeNull();
  });
});

/** The models page on a gallery: one model added from elsewhere, one catalog model on disk, two to download. */
function galleryBackend(calls: { cmd: string; args: unknown }[], addFails = false) {
  const gallery = {
    catalog: [entry('on-disk', 2e9, { local_id: 'hf:org/on-disk' }), entry('small', 1e9), entry('big', 9e9)],
    local: [
      { id: 'hf:org/on-disk', name: 'org/on-disk', path: '/hf/on-disk', format: 'folder', size_bytes: 2e9, architecture: 'llama', supported: true,
        partial: false, error: null, location: { kind: 'hf_cache', repo: 'org/on-disk', commit: null }, vision: true, thinking: false, tools: false, load_settings: null },
    ],
    models_dir: '/m', hf_cache_dir: '/hf', disk_bytes: 2e9,
  };
  return (cmd: string, args: unknown) => {
    calls.push({ cmd, args });
    switch (cmd) {
      case 'list_models': return gallery;
      case 'fit_check': {
        const target = (args as { target: { kind: string; repo?: string; id?: string } }).target;
        return fit(target.repo === 'org/big' ? 'red' : 'green');
      }
      case 'add_model': {
        const path = (args as { path: string }).path;
        if (addFails) throw { code: 'NOT_A_MODEL', message: 'holiday photos is not a model folder: it has no config.json' };
        gallery.local.push({ ...gallery.local[0], id: `file:${path}`, name: 'mine', path, location: { kind: 'user_file' } as never });
        return `file:${path}`;
      }
      default: return null;
    }
  };
}

describe('the models page', () => {
  it('shows My models first, a catalog model on disk as Load, each card’s fit and the best fit', async () => {
    const calls: { cmd: string; args: unknown }[] = [];
    mockIPC(galleryBackend(calls));
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await settle();
    const headings = [...view.el.querySelectorAll('h2')].map((e) => e.textContent);
    expect(headings[0]).toBe('My models');
    expect(headings.at(-1)).toBe('Recommended');
    // My models (the list on disk) comes before the search and the catalog
    const order = [...view.el.querySelectorAll('[data-testid=local-models], section.hub-search, [data-testid=catalog]')].map((e) => e.getAttribute('data-testid') ?? 'hub-search');
    expect(order[0]).toBe('local-models');
    expect(order.at(-1)).toBe('catalog');
    expect(view.el.querySelector('[data-testid=disk-summary]')!.textContent).toMatch(/^On this computer: 2\.0 GB in 1 model/);

    const card = (id: string) => view.el.querySelector<HTMLElement>(`[data-testid=catalog-model][data-model-id="${id}"]`)!;
    // on disk: Load, never Download; its fit asked at its load settings, on disk
    expect(card('on-disk').querySelector('[data-testid=download]')).toBeNull();
    expect(card('on-disk').querySelector('[data-testid=catalog-load]')!.textContent).toBe('Load');
    expect(card('on-disk').querySelector('[data-testid=on-disk]')).not.toBeNull();
    const targets = calls.filter((c) => c.cmd === 'fit_check').map((c) => (c.args as { target: unknown }).target);
    expect(targets).toContainEqual({ kind: 'local', id: 'hf:org/on-disk' });
    expect(targets).toContainEqual({ kind: 'hub', repo: 'org/small', variant: null });
    // each card marked by its fit; the largest green one is the best fit
    expect(card('small').querySelector<HTMLElement>('[data-testid=fit]')!.dataset.level).toBe('green');
    expect(card('big').querySelector<HTMLElement>('[data-testid=fit]')!.textContent).toBe('Too big');
    expect(card('big').querySelector('[data-testid=download]')).not.toBeNull();
    expect(view.el.querySelectorAll('[data-testid=best-fit]').length).toBe(1);
    expect(card('on-disk').querySelector('[data-testid=best-fit]')).not.toBeNull();
    expect(card('small').textContent).toContain('≈ 1.0 GB');
  });

  it('adds a model from the dialog, and says why one cannot be added', async () => {
    const calls: { cmd: string; args: unknown }[] = [];
    mockIPC(galleryBackend(calls));
    const toasts: string[] = [];
    const view = new ModelsView((m) => toasts.push(m), async (kind) => (kind === 'folder' ? '/disk/mine' : null));
    document.body.append(view.el);
    await view.refresh();
    view.el.querySelector<HTMLButtonElement>('[data-testid=add-model-folder]')!.click();
    await settle();
    expect(calls.filter((c) => c.cmd === 'add_model').map((c) => c.args)).toEqual([{ path: '/disk/mine' }]);
    expect(toasts).toContain('Added mine to My models.');
    const row = view.el.querySelector<HTMLElement>('[data-testid=local-model][data-model-id="file:/disk/mine"]')!;
    expect(row.querySelector('[data-testid=added-badge]')).not.toBeNull();
    expect(row.querySelector('[data-testid=remove-added-model]')).not.toBeNull();
    expect(row.querySelector('[data-testid=delete-model]')).toBeNull(); // its files are not ours to delete
    // cancelled: nothing asked
    view.el.querySelector<HTMLButtonElement>('[data-testid=add-model-gguf]')!.click();
    await settle();
    expect(calls.filter((c) => c.cmd === 'add_model').length).toBe(1);

    clearMocks();
    mockIPC(galleryBackend(calls, true));
    await view.addPaths(['/disk/holiday photos']);
    const error = view.el.querySelector<HTMLElement>('[data-testid=add-model-error]')!;
    expect(error.dataset.code).toBe('NOT_A_MODEL');
    expect(error.textContent).toMatch(/holiday photos is not a model folder: it has no config\.json/);
  });
});

describe('lists asked one after another', () => {
  it('shows the newer one when the older answer comes back last', async () => {
    // the scan the page asked for when it opened ends after the one a drop
    // asked for: the model just added stays on the list
    const answers: ((g: unknown) => void)[] = [];
    const calls: { cmd: string; args: unknown }[] = [];
    const backend = galleryBackend(calls);
    const gallery = backend('list_models', {}) as { local: { id: string }[] };
    const before = structuredClone(gallery);
    mockIPC((cmd, args) => (cmd === 'list_models' ? new Promise((r) => answers.push(r)) : backend(cmd, args)));
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    const opened = view.refresh();
    const afterAdd = view.refresh();
    await settle();
    expect(answers.length).toBe(2);
    const added = structuredClone(before);
    added.local.push({ ...before.local[0], id: 'file:/disk/mine' });
    answers[1](added);
    await afterAdd;
    answers[0](before);
    await opened;
    const ids = [...view.el.querySelectorAll<HTMLElement>('[data-testid=local-model]')].map((r) => r.dataset.modelId);
    expect(ids).toContain('file:/disk/mine');
  });
});

/** The app on a mocked backend; `drop` is what a drop on the window hands it. */
async function startedApp(backend: (cmd: string, args: unknown) => unknown) {
  let drop: (paths: string[]) => void = () => {};
  mockIPC((cmd, args) => {
    switch (cmd) {
      case 'server_status': return { running: false, url: null, error: null };
      case 'get_settings': return { settings: { thinking: true }, restart_needed: false, notes: [] };
      case 'list_chats': case 'active_replies': case 'list_bulk_jobs': case 'list_presets': case 'take_opened_files': return [];
      default: return backend(cmd, args);
    }
  }, { shouldMockEvents: true });
  // a variable, not a literal: the platform may offer more than App asks of it
  const platform = {
    pickFiles: async () => [], pickChatFile: async () => null, pickExportFolder: async () => null, pickModel: async () => null,
    onDrop: (h: { drop(paths: string[]): void }) => { drop = h.drop; },
  };
  const app = new App(platform);
  document.body.append(app.el);
  await app.start();
  return { app, drop: (paths: string[]) => drop(paths) };
}

describe('a drop on the window', () => {
  it('sends a model folder or .gguf to the models flow and an image to the chat', async () => {
    const calls: { cmd: string; args: unknown }[] = [];
    const gallery = galleryBackend(calls);
    const { app, drop } = await startedApp((cmd, args) => {
      if (cmd === 'engine_status') return status({ state: 'ready', model: loaded({ vision: true }) });
      if (cmd === 'model_candidates') return (args as { paths: string[] }).paths.filter((p) => !p.endsWith('.png'));
      if (cmd === 'add_attachment_path') calls.push({ cmd, args });
      if (cmd === 'add_attachment_path') return { sha256: 'a'.repeat(64), mime: 'image/png', size: 1, path: (args as { path: string }).path };
      return gallery(cmd, args);
    });
    drop(['/disk/mine']);
    await settle();
    expect(calls.filter((c) => c.cmd === 'add_model').map((c) => c.args)).toEqual([{ path: '/disk/mine' }]);
    expect(calls.some((c) => c.cmd === 'add_attachment_path')).toBe(false);
    expect(app.el.querySelector('[data-testid=models-page]')).not.toBeNull();
    expect(app.el.querySelector('[data-testid=local-model][data-model-id="file:/disk/mine"]')).not.toBeNull();
    // an image dropped on the chat is attached as before
    (app.el.querySelector('[data-testid=nav-chat]') as HTMLButtonElement).click();
    drop(['/photos/cat.png']);
    await settle();
    expect(calls.filter((c) => c.cmd === 'add_attachment_path').map((c) => c.args)).toEqual([{ path: '/photos/cat.png' }]);
    expect(document.querySelectorAll('[data-testid=composer-thumb]').length).toBe(1);
  });
});

describe('the first launch with no model', () => {
  it('suggests the recommended model that fits best, and downloads it', async () => {
    const calls: { cmd: string; args: unknown }[] = [];
    const gallery = galleryBackend(calls);
    const { app } = await startedApp((cmd, args) => {
      if (cmd === 'engine_status') return status();
      if (cmd === 'list_models') {
        const g = gallery(cmd, args) as { catalog: CatalogEntry[] };
        return { ...g, catalog: g.catalog.filter((c) => c.id !== 'on-disk'), local: [] };
      }
      return gallery(cmd, args);
    });
    await settle();
    const suggested = app.el.querySelector('[data-testid=suggested-model]')!;
    // "big" does not fit: "small" is the best that does
    expect(suggested.textContent).toMatch(/^Suggested for this computer: Model small \(fits, 1\.0 GB download\)/);
    app.el.querySelector<HTMLButtonElement>('[data-testid=use-suggested-model]')!.click();
    await settle();
    expect(calls.filter((c) => c.cmd === 'download_model').map((c) => c.args)).toEqual([{ id: 'small', files: null }]);
  });
});

describe('the model’s state', () => {
  it('is read once for the header, the status bar and the composer', () => {
    const cases: [EngineStatus | null, string, string][] = [
      [null, 'No model loaded', 'No model loaded'],
      [status({ state: 'ready', model: loaded() }), 'Tiny', 'Tiny'],
      [status({ state: 'loading', loading: 'Big', model: loaded() }), 'Loading Big…', 'Loading Big…'],
      [status({ idle_unloaded: loaded() }), 'Tiny (unloaded while idle)', 'Tiny unloaded while idle: your next message loads it again'],
      [status({ error: { code: 'LOAD_FAILED', message: 'bad file' } }), 'No model loaded', 'Load failed: bad file'],
    ];
    for (const [s, header, bar] of cases) {
      expect([headerLabel(modelView(s)), statusLabel(modelView(s))]).toEqual([header, bar]);
    }
  });

  it('after a restart, the header says the loaded model as the status bar and composer do', async () => {
    const { app } = await startedApp((cmd) => (cmd === 'engine_status' ? status({ state: 'ready', model: loaded({ name: 'Qwen3-VL 4B' }) }) : null));
    const pill = () => app.el.querySelector('[data-testid=model-pill]')!.textContent;
    const bar = () => app.el.querySelector('[data-testid=status-bar] .status-item')!.textContent;
    const composer = () => app.el.querySelector('.composer-model-name')?.textContent;
    expect([pill(), bar(), composer()]).toEqual(['Qwen3-VL 4B', 'Qwen3-VL 4B', 'Qwen3-VL 4B']);
    // every later change reaches all three at once
    await emit('engine-status', status({ state: 'loading', loading: 'Gemma 3 4B', model: loaded({ name: 'Qwen3-VL 4B' }) }));
    expect([pill(), bar()]).toEqual(['Loading Gemma 3 4B…', 'Loading Gemma 3 4B…']);
    await emit('engine-status', status({ state: 'ready', model: loaded({ name: 'Gemma 3 4B' }) }));
    expect([pill(), bar(), composer()]).toEqual(['Gemma 3 4B', 'Gemma 3 4B', 'Gemma 3 4B']);
  });

  it('is not "idle" while a reply is being prepared', () => {
    const s = status({ state: 'ready', model: loaded() });
    const engine = { running: 0, waiting: 0, kv_cache_bytes: 0, active_memory_bytes: 1e8, decode_steps: 0, kv_quantization: 'off' };
    expect(statusItems(s, { engine, decode_tps: 0, app_replies: 0 }, null)).toContain('idle');
    // this window started one the engine does not run yet
    expect(statusItems(s, { engine, decode_tps: 0, app_replies: 0 }, null, 1)).toContain('starting 1 answer');
    // the app's own count (a reply another window or a restart began)
    const items = statusItems(s, { engine, decode_tps: 0, app_replies: 2 }, null);
    expect(items).toContain('starting 2 answers');
    expect(items).not.toContain('idle');
  });

  it('shows what speculative decoding keeps once it has verified drafts', () => {
    const s = status({ state: 'ready', model: loaded() });
    const base = { running: 1, waiting: 0, kv_cache_bytes: 0, active_memory_bytes: 1e8, decode_steps: 9, kv_quantization: 'off' };
    const off = { status: 'off', verify_passes: 0, drafted_tokens: 0, accepted_tokens: 0, speculating_rows: 0, produced_tokens: 0 };
    expect(statusItems(s, { engine: { ...base, speculation: off }, decode_tps: 5, app_replies: 0 }, null).join(' ')).not.toContain('drafts');
    const on = { status: 'prompt lookup', verify_passes: 4, drafted_tokens: 20, accepted_tokens: 15, speculating_rows: 4, produced_tokens: 19 };
    expect(statusItems(s, { engine: { ...base, speculation: on }, decode_tps: 5, app_replies: 0 }, null)).toContain('drafts kept 75% · 4.8 tokens/pass');
  });

  it("shows a draft model's own cache beside the drafts kept", () => {
    const s = status({ state: 'ready', model: loaded() });
    const base = { running: 1, waiting: 0, kv_cache_bytes: 0, active_memory_bytes: 1e8, decode_steps: 9, kv_quantization: 'off' };
    const drafting = { status: 'draft model d', verify_passes: 4, drafted_tokens: 20, accepted_tokens: 15, speculating_rows: 4, produced_tokens: 19 };
    const items = (speculation: object) => statusItems(s, { engine: { ...base, speculation }, decode_tps: 5, app_replies: 0 }, null);
    // prompt lookup has no draft model: nothing about a draft cache
    expect(items({ ...drafting, draft_prefix_cache: null }).join(' ')).not.toContain('draft cache');
    // a draft model before any prompt reached it: nothing to say yet
    const unused = { hits: 0, misses: 0, reused_tokens: 0, entries: 0, bytes: 0, capacity_bytes: 134217728 };
    expect(items({ ...drafting, draft_prefix_cache: unused }).join(' ')).not.toContain('draft cache');
    // the first turn kept its prompt; the next turn read 48 tokens from it
    const first = { ...unused, misses: 1, entries: 1, bytes: 400_000 };
    expect(items({ ...drafting, draft_prefix_cache: first })).toContain('draft cache 0 hits, reused 0 tokens · 1 kept, 400 KB');
    const next = { ...unused, hits: 1, misses: 1, reused_tokens: 48, entries: 2, bytes: 1_500_000 };
    const shown = items({ ...drafting, draft_prefix_cache: next });
    const kept = shown.indexOf('drafts kept 75% · 4.8 tokens/pass');
    expect(kept).toBeGreaterThan(0);
    expect(shown[kept + 1]).toBe('draft cache 1 hit, reused 48 tokens · 2 kept, 1.5 MB');
  });
});
