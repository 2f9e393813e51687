// Settings (issue 29): a value the app would refuse is marked on its field
// (aria-invalid and a message beside it), not only in grey at the top, and
// is not saved; the theme comes first on the page.
import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { numberProblem, SettingsPage } from './settingsView';
import type { Settings } from './api';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const settings = {
  thinking: true, thinking_budget: 0, context_policy: 'stop', kv_bits: 0, kv_group_size: 64, max_context: 0, vision_cache_mb: 512, prefix_disk_cache_mb: 4096, temperature: 0.7, top_p: 0.95, top_k: 0,
  min_p: 0, repetition_penalty: 1.1, max_tokens: 1024, system_prompt: '', max_running: 8, speed_up: 'off', unload_after_idle_minutes: 0, server_enabled: false, server_port: 8080,
  server_file_url_folders: [], cluster: { enabled: false, hostfile: '', hosts: [], join_timeout_secs: 120, split: 'auto' },
} as unknown as Settings;

async function page() {
  const saved: Settings[] = [];
  mockIPC((cmd, args) => {
    if (cmd === 'get_settings') return { settings, restart_needed: false, notes: [], model_has_own_load_settings: null };
    if (cmd === 'server_status') return { running: false, url: null, error: null };
    if (cmd === 'save_settings') { const s = (args as { settings: Settings }).settings; saved.push({ ...s }); return { settings: s, restart_needed: false, notes: [] }; }
    if (cmd === 'cluster_status') return { enabled: false, state: 'not_joined', ranks: [], error: null, restart_needed: false, split: 'auto' };
    return null;
  });
  const p = new SettingsPage(() => {});
  document.body.append(p.el);
  await p.refresh();
  return { p, saved };
}

describe('a value Settings would refuse', () => {
  it('is marked on its field with a message beside it, and not saved; a good one clears the mark', async () => {
    const { p, saved } = await page();
    const temp = p.el.querySelector<HTMLInputElement>('[data-testid=setting-temperature]')!;
    const problem = p.el.querySelector<HTMLElement>('[data-testid=setting-temperature-error]')!;
    temp.value = '9';
    temp.dispatchEvent(new Event('input'));
    expect(temp.getAttribute('aria-invalid')).toBe('true');
    expect(problem.hidden).toBe(false);
    expect(problem.textContent).toBe('Must be between 0 and 5.');
    // the message is read with the field
    expect(temp.getAttribute('aria-describedby')).toContain(problem.id);
    expect(p.el.querySelector('[data-testid=settings-saved]')!.textContent).toBe('Not saved: Temperature — Must be between 0 and 5.');
    p.flush();
    await Promise.resolve();
    expect(saved).toEqual([]);
    temp.value = '0.3';
    temp.dispatchEvent(new Event('input'));
    expect(temp.getAttribute('aria-invalid')).toBe('false');
    expect(problem.hidden).toBe(true);
    p.flush();
    await new Promise((r) => setTimeout(r, 0));
    expect(saved.at(-1)?.temperature).toBe(0.3);
  });

  it('is told in words: a number, in range, whole where it must be', () => {
    const tokens = { min: 1, max: 131072, step: 1 };
    expect(numberProblem(tokens, '12')).toBeNull();
    expect(numberProblem(tokens, '0')).toBe('Must be between 1 and 131072.');
    expect(numberProblem(tokens, '2.5')).toBe('Must be a whole number.');
    expect(numberProblem(tokens, 'abc')).toBe('Enter a number.');
    expect(numberProblem({ min: 0, max: 5, step: 0.05 }, '0.33')).toBeNull();
  });
});

describe('the settings page', () => {
  it('begins with how the app looks (light or dark)', async () => {
    const { p } = await page();
    const sections = [...p.el.querySelectorAll('section h2')].map((h) => h.textContent);
    expect(sections[0]).toBe('Appearance');
    expect(p.el.querySelector('section')!.querySelector('[data-testid=setting-theme]')).not.toBeNull();
  });
});
