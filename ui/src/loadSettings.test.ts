import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { loadSettingsWords, readLoadForm } from './loadSettings';
import { ModelsView } from './modelsView';
import type { FitCheck } from './bindings/FitCheck';
import type { ModelLoadSettings } from './bindings/ModelLoadSettings';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const tick = () => new Promise((r) => setTimeout(r, 0));
const settle = async () => { for (let i = 0; i < 6; i++) await tick(); };

/** One chat's verdict (green), with `sequences` at once as the worst case (red past 2). */
const fit = (sequences: number): FitCheck => ({
  variant: null, level: 'green',
  estimate: { weights: 1_000_000_000, kv_cache: 100_000_000, vision: 0, overhead: 200_000_000, total: 1_300_000_000 },
  settings: { context: 2048, kv_bits: 8, sequences: 1 }, limit_bytes: 8_000_000_000, available_bytes: 4_000_000_000,
  max_green_context: 2048, summary: '',
  worst: {
    level: sequences > 2 ? 'red' : 'green', settings: { context: 2048, kv_bits: 8, sequences },
    estimate: { weights: 1_000_000_000, kv_cache: sequences * 100_000_000, vision: 0, overhead: 200_000_000, total: 1_200_000_000 + sequences * 100_000_000 },
  },
});

const local = (over: { load_settings?: ModelLoadSettings | null } = {}) => ({
  id: 'dir:tiny', name: 'tiny', path: '/m/tiny', format: 'safetensors', architecture: 'llama', supported: true, size_bytes: 1,
  partial: false, error: null, location: { kind: 'models_dir' }, vision: false, thinking: false, tools: false, load_settings: null, ...over,
});

describe('load settings form', () => {
  it('reads the three values and refuses what no engine takes', () => {
    expect(readLoadForm({ context: '4096', kvBits: '8', maxRunning: '2' })).toEqual({ settings: { max_context: 4096, kv_bits: 8, max_running: 2, speed_up: 'off' } });
    expect(readLoadForm({ context: '0', kvBits: '0', maxRunning: '1', speedUp: 'prompt_lookup' })).toEqual({ settings: { max_context: 0, kv_bits: 0, max_running: 1, speed_up: 'prompt_lookup' } });
    expect(readLoadForm({ context: '0', kvBits: '0', maxRunning: '1', speedUp: 'turbo' })).toEqual({ error: 'Speed up replies is off, prompt lookup, the model’s MTP heads, a draft model or a drafter.' });
    expect(readLoadForm({ context: '', kvBits: '0', maxRunning: '1' })).toEqual({ settings: { max_context: 0, kv_bits: 0, max_running: 1, speed_up: 'off' } });
    expect(readLoadForm({ context: '-1', kvBits: '0', maxRunning: '1' })).toHaveProperty('error');
    expect(readLoadForm({ context: '1.5', kvBits: '0', maxRunning: '1' })).toHaveProperty('error');
    expect(readLoadForm({ context: '0', kvBits: '3', maxRunning: '1' })).toHaveProperty('error');
    expect(readLoadForm({ context: '0', kvBits: '0', maxRunning: '0' })).toEqual({ error: 'Running sequences are a whole number from 1 to 64.' });
    expect(readLoadForm({ context: '0', kvBits: '0', maxRunning: '65' })).toHaveProperty('error');
  });

  it('says a model’s own settings in words', () => {
    expect(loadSettingsWords({ max_context: 4096, kv_bits: 8, max_running: 2, speed_up: 'off' })).toBe('context 4,096 · KV 8-bit · 2 at once');
    expect(loadSettingsWords({ max_context: 0, kv_bits: 0, max_running: 1, speed_up: 'prompt_lookup' })).toBe('the model’s own context · KV not quantized · 1 at once · prompt lookup');
  });
});

describe('Load settings on the Models page', () => {
  it('edits a model’s settings with the fit asked for the values chosen, and saves them', async () => {
    const calls: { cmd: string; args: Record<string, unknown> }[] = [];
    let saved: ModelLoadSettings | null = null;
    mockIPC((cmd, args) => {
      calls.push({ cmd, args: args as Record<string, unknown> });
      if (cmd === 'list_models') return { catalog: [], local: [local({ load_settings: saved })], models_dir: '/m', hf_cache_dir: null, disk_bytes: 1 };
      if (cmd === 'get_model_load_settings') {
        return { id: 'dir:tiny', settings: { max_context: 0, kv_bits: 0, max_running: 8, speed_up: 'off' as const }, remembered: false,
          defaults: { max_context: 0, kv_bits: 0, max_running: 8, speed_up: 'off' as const }, reload_needed: false };
      }
      if (cmd === 'fit_check') return fit((args as { maxRunning: number }).maxRunning);
      if (cmd === 'save_model_load_settings') {
        saved = (args as { settings: ModelLoadSettings }).settings;
        return { id: 'dir:tiny', settings: saved, remembered: true, defaults: { max_context: 0, kv_bits: 0, max_running: 8, speed_up: 'off' as const }, reload_needed: false };
      }
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await settle();
    view.el.querySelector<HTMLButtonElement>('[data-testid=local-model] [data-testid=load-settings]')!.click();
    await settle();
    const dialog = document.querySelector<HTMLElement>('[data-testid=load-settings-dialog]')!;
    expect(dialog.querySelector('h2')!.textContent).toBe('Load settings · tiny');
    expect(dialog.querySelector('.hint')!.textContent).toMatch(/follows Settings/);
    expect(dialog.querySelector<HTMLButtonElement>('[data-testid=load-settings-forget]')!.disabled).toBe(true);
    // the verdict for the values shown: one chat's, every running sequence counted as the worst case
    const worst = () => dialog.querySelector<HTMLElement>('[data-testid=load-settings-fit] [data-testid=fit-worst]')!;
    expect(worst().textContent).toBe('At most, 8 answers at once at 2,048 tokens each: about 2.0 GB (does not fit)');
    expect(worst().dataset.level).toBe('red');

    const running = dialog.querySelector<HTMLInputElement>('[data-testid=load-setting-max_running]')!;
    running.value = '2';
    const kv = dialog.querySelector<HTMLSelectElement>('[data-testid=load-setting-kv_bits]')!;
    kv.value = '8';
    kv.dispatchEvent(new Event('change'));
    await settle();
    const asked = calls.filter((c) => c.cmd === 'fit_check').at(-1)!.args;
    expect(asked).toEqual({ target: { kind: 'local', id: 'dir:tiny' }, context: 0, kvBits: 8, maxRunning: 2 });
    const verdict = dialog.querySelector<HTMLElement>('[data-testid=load-settings-fit] [data-testid=fit]')!;
    expect(verdict.dataset.level).toBe('green');
    expect(worst().textContent).toMatch(/^At most, 2 answers at once at 2,048 tokens each: about 1\.4 GB \(fits\)$/);

    // a value no engine takes is said in the dialog, and not sent
    running.value = '0';
    dialog.querySelector<HTMLButtonElement>('[data-testid=load-settings-save]')!.click();
    await settle();
    expect(dialog.querySelector<HTMLElement>('[data-testid=load-settings-error]')!.hidden).toBe(false);
    expect(calls.some((c) => c.cmd === 'save_model_load_settings')).toBe(false);

    running.value = '2';
    dialog.querySelector<HTMLButtonElement>('[data-testid=load-settings-save]')!.click();
    await settle();
    expect(calls.find((c) => c.cmd === 'save_model_load_settings')!.args).toEqual({ id: 'dir:tiny', settings: { max_context: 0, kv_bits: 8, max_running: 2, speed_up: 'off' } });
    expect(document.querySelector('[data-testid=load-settings-dialog]')).toBeNull();
    expect(calls.some((c) => c.cmd === 'load_model')).toBe(false);
    // the row says it has settings of its own
    expect(view.el.querySelector('[data-testid=own-load-settings]')!.textContent).toBe('Loads with its own settings: the model’s own context · KV 8-bit · 2 at once');
  });

  it('asks the Hub result’s verdict again once the downloaded model’s settings change', async () => {
    const hubFits: unknown[] = [];
    const settings = { max_context: 0, kv_bits: 0, max_running: 8, speed_up: 'off' as const };
    mockIPC((cmd, args) => {
      if (cmd === 'list_models') return { catalog: [], local: [{ ...local(), id: 'hf:org/m', name: 'org/m' }], models_dir: '/m', hf_cache_dir: null, disk_bytes: 1 };
      if (cmd === 'search_hub') {
        return { has_more: false, results: [{ repo: 'org/m', url: '', author: 'org', architecture: 'llama', support: { supported: true, family: 'Llama', reason: null },
          capabilities: { vision: false, thinking: false, tools: false }, pipeline_tag: null, downloads: 0, likes: 0, license: null, gated: 'no',
          private: false, parameters: null, last_modified: null, variants: [] }] };
      }
      if (cmd === 'get_model_load_settings') return { id: 'hf:org/m', settings, remembered: false, defaults: settings, reload_needed: false };
      if (cmd === 'save_model_load_settings') return { id: 'hf:org/m', settings, remembered: true, defaults: settings, reload_needed: false };
      if (cmd === 'fit_check') {
        if ((args as { target: { kind: string } }).target.kind === 'hub') hubFits.push(args);
        return fit(1);
      }
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await view.search.search();
    await settle();
    expect(hubFits).toHaveLength(1);
    view.el.querySelector<HTMLButtonElement>('[data-testid=load-settings]')!.click();
    await settle();
    document.querySelector<HTMLButtonElement>('[data-testid=load-settings-save]')!.click();
    await settle();
    expect(hubFits).toHaveLength(2);
  });

  it('reloads the loaded model when its settings change, and forgets them on Use Settings', async () => {
    const calls: string[] = [];
    const own = { max_context: 1024, kv_bits: 4, max_running: 1, speed_up: 'off' as const };
    const defaults = { max_context: 0, kv_bits: 0, max_running: 8, speed_up: 'off' as const };
    mockIPC((cmd) => {
      calls.push(cmd);
      if (cmd === 'list_models') return { catalog: [], local: [local({ load_settings: own })], models_dir: '/m', hf_cache_dir: null, disk_bytes: 1 };
      if (cmd === 'get_model_load_settings') return { id: 'dir:tiny', settings: own, remembered: true, defaults, reload_needed: false };
      if (cmd === 'fit_check') return fit(1);
      if (cmd === 'save_model_load_settings') return { id: 'dir:tiny', settings: own, remembered: true, defaults, reload_needed: true };
      if (cmd === 'forget_model_load_settings') return { id: 'dir:tiny', settings: defaults, remembered: false, defaults, reload_needed: true };
      if (cmd === 'load_model') return { state: 'ready', loading: null, model: null, knobs: null, error: null, idle_unloaded: null };
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    view.setStatus({ state: 'ready', loading: null, knobs: null, error: null, idle_unloaded: null,
      model: { id: 'dir:tiny', name: 'tiny', path: '', architecture: 'llama', quantization: null, quantization_words: null, max_context: 2048, vision: false, thinking: false, tools: false } });
    await view.refresh();
    await settle();
    view.el.querySelector<HTMLButtonElement>('[data-testid=load-settings]')!.click();
    await settle();
    let dialog = document.querySelector<HTMLElement>('[data-testid=load-settings-dialog]')!;
    expect(dialog.querySelector<HTMLInputElement>('[data-testid=load-setting-context]')!.value).toBe('1024');
    const save = dialog.querySelector<HTMLButtonElement>('[data-testid=load-settings-save]')!;
    expect(save.textContent).toBe('Save and reload');
    save.click();
    await settle();
    expect(calls.filter((c) => c === 'load_model')).toHaveLength(1);

    view.el.querySelector<HTMLButtonElement>('[data-testid=load-settings]')!.click();
    await settle();
    dialog = document.querySelector<HTMLElement>('[data-testid=load-settings-dialog]')!;
    dialog.querySelector<HTMLButtonElement>('[data-testid=load-settings-forget]')!.click();
    await settle();
    expect(calls).toContain('forget_model_load_settings');
    expect(calls.filter((c) => c === 'load_model')).toHaveLength(2);
    expect(document.querySelector('[data-testid=load-settings-dialog]')).toBeNull();
  });
});
