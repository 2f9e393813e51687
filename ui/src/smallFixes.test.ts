// Small things a tester met (issue 29): Copy says it copied, models are
// named as the user knows them, a preset saved in the chat settings dialog
// is in its list at once.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { COPIED_MS, copyWithFeedback } from './copyFeedback';
import { modelLabel } from './modelNames';
import { chatSettingsDialog } from './chatSettingsView';
import type { Settings } from './api';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; vi.useRealTimers(); });

describe('Copy', () => {
  it('says Copied, then Copy again; a clipboard that refuses says so', async () => {
    vi.useFakeTimers();
    const written: string[] = [];
    Object.defineProperty(navigator, 'clipboard', { configurable: true, value: { writeText: async (t: string) => { written.push(t); } } });
    const button = document.createElement('button');
    button.textContent = 'Copy';
    expect(await copyWithFeedback(button, 'the answer')).toBe(true);
    expect(written).toEqual(['the answer']);
    expect(button.textContent).toBe('Copied');
    vi.advanceTimersByTime(COPIED_MS);
    expect(button.textContent).toBe('Copy');
    Object.defineProperty(navigator, 'clipboard', { configurable: true, value: { writeText: async () => { throw new Error('denied'); } } });
    expect(await copyWithFeedback(button, 'x')).toBe(false);
    expect(button.textContent).toBe('Copy failed');
    vi.advanceTimersByTime(COPIED_MS);
    expect(button.textContent).toBe('Copy');
  });
});

describe('model names', () => {
  it('are the gallery’s, else the id without the app’s prefix and extension', () => {
    const names = new Map([['dir:SmolLM2-135M-Instruct-Q4_1.gguf', 'SmolLM2 135M Instruct']]);
    expect(modelLabel('dir:SmolLM2-135M-Instruct-Q4_1.gguf', names)).toBe('SmolLM2 135M Instruct');
    expect(modelLabel('dir:Other-1B.gguf', names)).toBe('Other-1B');
    expect(modelLabel('hf:Qwen/Qwen3-VL-2B-Instruct', names)).toBe('Qwen/Qwen3-VL-2B-Instruct');
    for (const id of ['dir:x.gguf', 'hf:a/b']) expect(modelLabel(id, names)).not.toMatch(/^(dir|hf):|\.gguf$/);
  });
});

describe('the chat settings dialog', () => {
  it('lists a preset saved in it at once', async () => {
    mockIPC((cmd, args) => {
      if (cmd === 'save_preset') return { id: 5, name: (args as { name: string }).name, settings: {}, answer_format: null, created_at: 0 };
    });
    const global = { temperature: 0.7, top_p: 0.95, top_k: 0, min_p: 0, repetition_penalty: 1.1, max_tokens: 1024, thinking_budget: 0, system_prompt: '', thinking: true, context_policy: 'stop' } as unknown as Settings;
    void chatSettingsDialog({ own: {}, global, answerFormat: null, models: [], presets: [] }, () => {});
    const select = document.querySelector<HTMLSelectElement>('[data-testid=preset-select]')!;
    expect(select.options[0].textContent).toBe('No presets yet');
    document.querySelector<HTMLInputElement>('[data-testid=preset-name]')!.value = 'Short answers';
    document.querySelector<HTMLButtonElement>('[data-testid=preset-save]')!.click();
    await vi.waitFor(() => expect([...select.options].map((o) => o.textContent)).toEqual(['Apply a preset…', 'Short answers']));
  });
});

describe('a Hub search that fails', () => {
  it('says so in plain words, by the error code, never with the raw network error', async () => {
    const { searchErrorText } = await import('./downloadErrors');
    const raw = 'https://huggingface.co/api/models?search=qwen: error sending request for url (https://huggingface.co/api/models?search=qwen): dns error';
    const offline = searchErrorText({ code: 'NETWORK_ERROR', message: raw });
    expect(offline).toMatch(/^No connection to Hugging Face\./);
    expect(offline).not.toMatch(/dns|https?:/);
    expect(searchErrorText({ code: 'HTTP_ERROR', message: raw })).not.toMatch(/https?:/);
    expect(searchErrorText({ code: 'INVALID_INPUT', message: 'empty query' })).toBe('The search failed: empty query');
  });
});

describe('the export dialog', () => {
  it('offers the chat’s title as a folder name a file system takes', async () => {
    const { exportName } = await import('./exportName');
    expect(exportName('What is in ../this picture?')).toBe('What is in .. this picture');
    expect(exportName('a/b\\c:d')).toBe('a b c d');
    expect(exportName('')).toBe('Chat');
    expect(exportName('..')).toBe('Chat');
    expect(exportName('x'.repeat(100)).length).toBe(60);
  });
});

describe('a sent picture', () => {
  it('opens larger; Escape closes it (before the page’s Esc stops a reply) and the focus comes back', async () => {
    const { openImageViewer } = await import('./imageViewer');
    const button = document.createElement('button');
    document.body.append(button);
    button.focus();
    const pageKeys: string[] = [];
    document.addEventListener('keydown', (e) => pageKeys.push(e.key));
    openImageViewer('att://localhost/abc', 'Image 1 you sent');
    const viewer = document.querySelector<HTMLElement>('[data-testid=image-viewer]')!;
    expect(viewer.getAttribute('role')).toBe('dialog');
    expect(viewer.querySelector('img')!.getAttribute('src')).toBe('att://localhost/abc');
    expect(document.activeElement).toBe(document.querySelector('[data-testid=image-viewer-close]'));
    document.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
    expect(document.querySelector('[data-testid=image-viewer]')).toBeNull();
    expect(pageKeys).toEqual([]);
    expect(document.activeElement).toBe(button);
  });
});
