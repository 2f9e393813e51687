import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { statusItems } from './statusBar';
import { ModelsView } from './modelsView';
import type { EngineStatus } from './bindings/EngineStatus';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const sleeping: EngineStatus = {
  state: 'unloaded', loading: null, model: null, knobs: null, error: null,
  idle_unloaded: { id: 'dir:tiny', name: 'Tiny', path: '', architecture: 'llama', quantization: null, quantization_words: null, max_context: 2048, vision: false, thinking: false, tools: false },
};

describe('a model unloaded after the idle time', () => {
  it('is named in the status bar with what happens next', () => {
    expect(statusItems(sleeping, null, null)[0]).toBe('Tiny unloaded while idle: your next message loads it again');
    expect(statusItems({ ...sleeping, idle_unloaded: null }, null, null)[0]).toBe('No model loaded');
  });

  it('is named on the Models page', async () => {
    mockIPC((cmd) => {
      if (cmd === 'list_models') return { catalog: [], local: [], models_dir: '/m', hf_cache_dir: null, disk_bytes: 0 };
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    view.setStatus(sleeping);
    await view.refresh();
    expect(view.el.querySelector('[data-testid=idle-unloaded]')!.textContent).toMatch(/^Tiny was unloaded after the idle time/);
    view.setStatus({ ...sleeping, idle_unloaded: null });
    expect(view.el.querySelector('[data-testid=idle-unloaded]')).toBeNull();
  });
});
