import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { draftModelsNote, loadSettingsWords, readLoadForm, readSpeedUp, speedUpHint, speedUpOptions, speedUpValue } from './loadSettings';
import { ModelsView } from './modelsView';
import type { ModelLoadSettings } from './bindings/ModelLoadSettings';
import type { SpeedUpChoices } from './bindings/SpeedUpChoices';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const tick = () => new Promise((r) => setTimeout(r, 0));
const settle = async () => { for (let i = 0; i < 6; i++) await tick(); };

const choices: SpeedUpChoices = {
  mtp: true,
  draft_models: [{ id: 'hf:org/small', name: 'org/small', reason: null }],
  not_listed: [
    { id: 'dir:other', name: 'other', reason: 'another vocabulary (5 tokens, this model has 6)' },
    { id: 'hf:org/qwen35', name: 'org/qwen35', reason: 'it keeps a recurrent state, which cannot be cut back to the accepted tokens' },
  ],
};

const fit = {
  variant: null, level: 'green', settings: { context: 2048, kv_bits: 0, sequences: 1 }, limit_bytes: 8e9, available_bytes: 4e9,
  estimate: { weights: 1e9, kv_cache: 1e8, vision: 0, overhead: 2e8, total: 1.3e9 }, max_green_context: 2048, summary: '',
  worst: { level: 'green', settings: { context: 2048, kv_bits: 0, sequences: 1 }, estimate: { weights: 1e9, kv_cache: 1e8, vision: 0, overhead: 2e8, total: 1.3e9 } },
};

const local = (over: Record<string, unknown> = {}) => ({
  id: 'dir:tiny', name: 'tiny', path: '/m/tiny', format: 'folder', architecture: 'llama', supported: true, size_bytes: 1, partial: false,
  error: null, location: { kind: 'models_dir', entry: 'tiny' }, vision: false, thinking: false, tools: false, load_settings: null, mtp_heads: false, ...over,
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
    expect(note).toContain('org/qwen35: it keeps a recurrent state');
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
