import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { draftModelsNote, draftModelsNoteTitle, loadSettingsWords, readLoadForm, readSpeedUp, SETTINGS_SPEED_UP_HINT, speedUpHint, speedUpOptions, speedUpValue } from './loadSettings';
import { ModelsView } from './modelsView';
import type { ModelLoadSettings } from './bindings/ModelLoadSettings';
import type { SpeedUpChoices } from './bindings/SpeedUpChoices';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const tick = () => new Promise((r) => setTimeout(r, 0));
const settle = async () => { for (let i = 0; i < 6; i++) await tick(); };

const choices: SpeedUpChoices = {
  mtp: true,
  draft_models: [{ id: 'hf:org/small', name: 'org/small', reason: null, drafter: null }],
  drafters: [],
  not_listed: [
    { id: 'dir:other', name: 'other', reason: 'another vocabulary (5 tokens, this model has 6)', drafter: null },
    { id: 'hf:org/qwen35', name: 'org/qwen35', reason: 'another vocabulary (the same 6 tokens, other ids)', drafter: null },
  ],
};

/** A Gemma 4's choices with its assistant on disk, and a split head that is not for it. */
const gemma: SpeedUpChoices = {
  mtp: false,
  draft_models: [],
  drafters: [{ id: 'dir:assistant', name: 'assistant', reason: null, drafter: 'assistant' }],
  not_listed: [
    { id: 'dir:head', name: 'head', reason: 'it is a Qwen3.5 multi-token-prediction head, which drafts for Qwen3.5 models, and this model is Gemma 4', drafter: 'mtp_head' },
    { id: 'dir:other', name: 'other', reason: 'another vocabulary (5 tokens, this model has 6)', drafter: null },
  ],
};

const fit = {
  variant: null, level: 'green', settings: { context: 2048, kv_bits: 0, sequences: 1 }, limit_bytes: 8e9, available_bytes: 4e9,
  estimate: { weights: 1e9, kv_cache: 1e8, vision: 0, overhead: 2e8, total: 1.3e9 }, max_green_context: 2048, summary: '',
  worst: { level: 'green', settings: { context: 2048, kv_bits: 0, sequences: 1 }, estimate: { weights: 1e9, kv_cache: 1e8, vision: 0, overhead: 2e8, total: 1.3e9 } },
};

const local = (over: Record<string, unknown> = {}) => ({
  id: 'dir:tiny', name: 'tiny', path: '/m/tiny', format: 'folder', architecture: 'llama', supported: true, size_bytes: 1, partial: false,
  error: null, location: { kind: 'models_dir', entry: 'tiny' }, vision: false, thinking: false, tools: false, load_settings: null, mtp_heads: false, drafter: null, ...over,
});

describe('speed up replies: the choices a model has', () => {
  it('offers MTP heads and draft models only when the model has them', () => {
    expect(speedUpOptions(null)).toEqual([['off', 'Off'], ['prompt_lookup', 'Prompt lookup']]);
    expect(speedUpOptions(choices)).toEqual([
      ['off', 'Off'], ['prompt_lookup', 'Prompt lookup'], ['mtp', 'Its own MTP heads'], ['draft:hf:org/small', 'Draft model: org/small'],
    ]);
    expect(speedUpOptions({ ...choices, mtp: false }).map(([v]) => v)).not.toContain('mtp');
  });

  it('turns a setting into a select value and back', () => {
    for (const s of ['off', 'prompt_lookup', 'mtp', { draft_model: 'hf:org/small' }] as const) {
      expect(readSpeedUp(speedUpValue(s))).toEqual(s);
    }
    expect(speedUpValue({ draft_model: 'dir:x' })).toBe('draft:dir:x');
    expect(readSpeedUp('draft:')).toBeNull();
    expect(readSpeedUp('turbo')).toBeNull();
  });

  it('reads the form with the new choices and refuses an unknown one', () => {
    const base = { context: '0', kvBits: '0', maxRunning: '1' };
    expect(readLoadForm({ ...base, speedUp: 'mtp' })).toEqual({ settings: { max_context: 0, kv_bits: 0, max_running: 1, speed_up: 'mtp' } });
    expect(readLoadForm({ ...base, speedUp: 'draft:hf:org/small' }))
      .toEqual({ settings: { max_context: 0, kv_bits: 0, max_running: 1, speed_up: { draft_model: 'hf:org/small' } } });
    expect(readLoadForm({ ...base, speedUp: 'turbo' })).toHaveProperty('error');
  });

  it('says each choice in words', () => {
    const s = (speed_up: ModelLoadSettings['speed_up']): ModelLoadSettings => ({ max_context: 0, kv_bits: 0, max_running: 1, speed_up });
    expect(loadSettingsWords(s('mtp'))).toBe('the model’s own context · KV not quantized · 1 at once · MTP heads');
    expect(loadSettingsWords(s({ draft_model: 'hf:org/small' }))).toBe('the model’s own context · KV not quantized · 1 at once · draft model org/small');
    expect(speedUpHint('mtp')).toMatch(/multi-token-prediction heads/);
    expect(speedUpHint('draft:hf:org/small')).toMatch(/same vocabulary/);
    expect(speedUpHint('prompt_lookup')).toMatch(/chat’s own text/);
  });

  it('says why models on disk are not offered as drafts', () => {
    expect(draftModelsNote({ ...choices, not_listed: [] })).toBeNull();
    const note = draftModelsNote(choices)!;
    expect(note).toMatch(/must use this model’s tokenizer/);
    expect(note).toContain('other: another vocabulary (5 tokens, this model has 6)');
    expect(note).toContain('org/qwen35: another vocabulary (the same 6 tokens, other ids)');
  });
});

describe('speed up replies: drafter folders made for the model', () => {
  it('offers the drafters made for the model, by kind', () => {
    expect(speedUpOptions(gemma)).toEqual([['off', 'Off'], ['prompt_lookup', 'Prompt lookup'], ['drafter:dir:assistant', 'Assistant drafter: assistant']]);
    const head: SpeedUpChoices = { ...gemma, drafters: [{ id: 'hf:org/head', name: 'org/head', reason: null, drafter: 'mtp_head' }] };
    expect(speedUpOptions(head).at(-1)).toEqual(['drafter:hf:org/head', 'MTP head: org/head']);
    expect(speedUpHint('drafter:dir:assistant', gemma)).toMatch(/assistant drafter made for this model .*keys and values/);
    expect(speedUpHint('drafter:hf:org/head', head)).toMatch(/multi-token-prediction head split from this model’s checkpoint/);
    expect(speedUpHint('drafter:dir:gone', gemma)).toMatch(/drafter folder made for this model/);
  });

  it('reads and says a drafter choice', () => {
    expect(speedUpValue({ drafter: 'dir:assistant' })).toBe('drafter:dir:assistant');
    expect(readSpeedUp('drafter:dir:assistant')).toEqual({ drafter: 'dir:assistant' });
    expect(readSpeedUp('drafter:')).toBeNull();
    expect(readLoadForm({ context: '0', kvBits: '0', maxRunning: '1', speedUp: 'drafter:dir:assistant' }))
      .toEqual({ settings: { max_context: 0, kv_bits: 0, max_running: 1, speed_up: { drafter: 'dir:assistant' } } });
    expect(loadSettingsWords({ max_context: 0, kv_bits: 0, max_running: 1, speed_up: { drafter: 'dir:assistant' } }))
      .toBe('the model’s own context · KV not quantized · 1 at once · drafter assistant');
  });

  it('says why drafters and models are not offered, apart', () => {
    const note = draftModelsNote(gemma)!;
    expect(note).toMatch(/must use this model’s tokenizer.*Not offered: other: another vocabulary/);
    expect(note).toMatch(/made for one model and drafts only for it\. Not offered: head: it is a Qwen3\.5/);
    expect(note.split('A drafter')[0]).not.toContain('head:');
    expect(draftModelsNoteTitle(gemma)).toBe('Why one model and one drafter on disk cannot draft for it');
    expect(draftModelsNoteTitle(choices)).toBe('Why 2 models on disk cannot draft for it');
    expect(SETTINGS_SPEED_UP_HINT).toMatch(/Load settings .*drafters made for it/);
  });

  it('picks the assistant in the Load settings dialog, with its hint, and saves it', async () => {
    const saved: ModelLoadSettings[] = [];
    const own: ModelLoadSettings = { max_context: 0, kv_bits: 0, max_running: 2, speed_up: 'off' };
    mockIPC((cmd, args) => {
      if (cmd === 'list_models') return { catalog: [], local: [local({ id: 'dir:gemma', name: 'gemma', architecture: 'gemma4_text' })], models_dir: '/m', hf_cache_dir: null, disk_bytes: 1 };
      if (cmd === 'get_model_load_settings') return { id: 'dir:gemma', settings: own, remembered: false, defaults: own, reload_needed: false, speed_up_choices: gemma };
      if (cmd === 'fit_check') return fit;
      if (cmd === 'save_model_load_settings') {
        saved.push((args as { settings: ModelLoadSettings }).settings);
        return { id: 'dir:gemma', settings: saved.at(-1), remembered: true, defaults: own, reload_needed: false, speed_up_choices: gemma };
      }
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await settle();
    view.el.querySelector<HTMLButtonElement>('[data-testid=load-settings]')!.click();
    await settle();
    const dialog = document.querySelector<HTMLElement>('[data-testid=load-settings-dialog]')!;
    const select = dialog.querySelector<HTMLSelectElement>('[data-testid=load-setting-speed_up]')!;
    expect([...select.options].map((o) => o.textContent)).toEqual(['Off', 'Prompt lookup', 'Assistant drafter: assistant']);
    expect(dialog.querySelector('[data-testid=draft-models-note] summary')!.textContent).toBe('Why one model and one drafter on disk cannot draft for it');
    select.value = 'drafter:dir:assistant';
    select.dispatchEvent(new Event('change'));
    expect(dialog.querySelector('[data-testid=speed-up-hint]')!.textContent).toMatch(/assistant drafter made for this model/);
    dialog.querySelector<HTMLButtonElement>('[data-testid=load-settings-save]')!.click();
    await settle();
    expect(saved).toEqual([{ max_context: 0, kv_bits: 0, max_running: 2, speed_up: { drafter: 'dir:assistant' } }]);
  });

  it('lists a drafter in the gallery as a drafter, not a chat model that fails to load', async () => {
    mockIPC((cmd) => {
      if (cmd === 'list_models') {
        return { catalog: [], local: [local({ id: 'dir:assistant', name: 'assistant', architecture: 'gemma4_assistant', supported: false, drafter: 'assistant' })], models_dir: '/m', hf_cache_dir: null, disk_bytes: 1 };
      }
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await settle();
    const row = view.el.querySelector<HTMLElement>('[data-testid=local-model]')!;
    expect(row.querySelector('[data-testid=drafter-badge]')!.textContent).toBe('Assistant drafter');
    expect(row.querySelector('[data-testid=drafter-note]')!.textContent).toMatch(/Not a chat model.*Speed up replies/);
    expect(row.textContent).not.toMatch(/not supported/);
    expect(row.querySelector('[data-testid=load-model]')).toBeNull();
    expect(row.querySelector('[data-testid=load-settings]')).toBeNull();
  });
});

describe('speed up replies in the Load settings dialog and the gallery', () => {
  it('shows the model’s choices, its saved draft, why others are missing, and saves the one picked', async () => {
    const saved: ModelLoadSettings[] = [];
    const own: ModelLoadSettings = { max_context: 0, kv_bits: 0, max_running: 2, speed_up: { draft_model: 'hf:org/small' } };
    mockIPC((cmd, args) => {
      if (cmd === 'list_models') return { catalog: [], local: [local({ load_settings: own, mtp_heads: true })], models_dir: '/m', hf_cache_dir: null, disk_bytes: 1 };
      if (cmd === 'get_model_load_settings') {
        return { id: 'dir:tiny', settings: own, remembered: true, defaults: { ...own, speed_up: 'off' }, reload_needed: false, speed_up_choices: choices };
      }
      if (cmd === 'fit_check') return fit;
      if (cmd === 'save_model_load_settings') {
        saved.push((args as { settings: ModelLoadSettings }).settings);
        return { id: 'dir:tiny', settings: saved.at(-1), remembered: true, defaults: own, reload_needed: false, speed_up_choices: choices };
      }
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await settle();
    const row = view.el.querySelector<HTMLElement>('[data-testid=local-model]')!;
    expect(row.querySelector('[data-testid=mtp-badge]')!.textContent).toBe('MTP heads');
    expect(row.querySelector('[data-testid=own-load-settings]')!.textContent).toContain('draft model org/small');
    row.querySelector<HTMLButtonElement>('[data-testid=load-settings]')!.click();
    await settle();
    const dialog = document.querySelector<HTMLElement>('[data-testid=load-settings-dialog]')!;
    const select = dialog.querySelector<HTMLSelectElement>('[data-testid=load-setting-speed_up]')!;
    expect(select.value).toBe('draft:hf:org/small');
    expect([...select.options].map((o) => o.textContent)).toEqual(['Off', 'Prompt lookup', 'Its own MTP heads', 'Draft model: org/small']);
    expect(dialog.querySelector('[data-testid=speed-up-hint]')!.textContent).toMatch(/same vocabulary/);
    expect(dialog.querySelector('[data-testid=draft-models-note]')!.textContent).toContain('other: another vocabulary');
    select.value = 'mtp';
    select.dispatchEvent(new Event('change'));
    expect(dialog.querySelector('[data-testid=speed-up-hint]')!.textContent).toMatch(/multi-token-prediction/);
    dialog.querySelector<HTMLButtonElement>('[data-testid=load-settings-save]')!.click();
    await settle();
    expect(saved).toEqual([{ max_context: 0, kv_bits: 0, max_running: 2, speed_up: 'mtp' }]);
  });

  it('keeps a saved draft that is gone visible, to be changed', async () => {
    const own: ModelLoadSettings = { max_context: 0, kv_bits: 0, max_running: 2, speed_up: { draft_model: 'hf:org/deleted' } };
    mockIPC((cmd) => {
      if (cmd === 'list_models') return { catalog: [], local: [local({ load_settings: own })], models_dir: '/m', hf_cache_dir: null, disk_bytes: 1 };
      if (cmd === 'get_model_load_settings') {
        return { id: 'dir:tiny', settings: own, remembered: true, defaults: own, reload_needed: false, speed_up_choices: { mtp: false, draft_models: [], not_listed: [] } };
      }
      if (cmd === 'fit_check') return fit;
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await settle();
    expect(view.el.querySelector('[data-testid=mtp-badge]')).toBeNull();
    view.el.querySelector<HTMLButtonElement>('[data-testid=load-settings]')!.click();
    await settle();
    const select = document.querySelector<HTMLSelectElement>('[data-testid=load-setting-speed_up]')!;
    expect(select.value).toBe('draft:hf:org/deleted');
    expect(select.selectedOptions[0].textContent).toBe('draft:hf:org/deleted (not available)');
    expect(document.querySelector('[data-testid=draft-models-note]')).toBeNull();
  });
});
