import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { ModelsView } from './modelsView';
import type { FitCheck } from './bindings/FitCheck';
import type { HubModel } from './bindings/HubModel';

afterEach(() => clearMocks());

const model = (over: Partial<HubModel>): HubModel => ({
  repo: 'org/m', url: 'https://huggingface.co/org/m', author: 'org', architecture: 'llama',
  support: { supported: true, family: 'Llama', reason: null }, capabilities: { vision: false, thinking: false, tools: false, mtp: false },
  pipeline_tag: null, downloads: 0, likes: 0, license: null, gated: 'no', private: false, parameters: null, last_modified: null,
  variants: [], ...over,
});

const fit = (level: 'green' | 'yellow' | 'red', maxGreen: number | null): FitCheck => ({
  variant: 'Q4_K_M', level,
  estimate: { weights: 2_000_000_000, kv_cache: 500_000_000, vision: 0, overhead: 300_000_000, total: 2_800_000_000 },
  settings: { context: 4096, kv_bits: 8, sequences: 1 }, limit_bytes: 16_000_000_000, available_bytes: 8_000_000_000,
  max_green_context: maxGreen, summary: 'needs about 2.8 GB',
  // one chat at the load settings: the worst case is the verdict itself
  worst: { level, estimate: { weights: 2_000_000_000, kv_cache: 500_000_000, vision: 0, overhead: 300_000_000, total: 2_800_000_000 }, settings: { context: 4096, kv_bits: 8, sequences: 1 } },
});

const emptyGallery = { catalog: [], local: [], models_dir: '/m', hf_cache_dir: null, disk_bytes: 0 };
const tick = () => new Promise((r) => setTimeout(r, 0));

describe('Hub search on the Models page', () => {
  it('lists results with support, badges, sizes, counts, license, gated state and the fit verdict', async () => {
    const calls: { cmd: string; args: unknown }[] = [];
    mockIPC((cmd, args) => {
      calls.push({ cmd, args });
      if (cmd === 'list_models') return emptyGallery;
      if (cmd === 'search_hub') {
        return { has_more: false, results: [
          model({ repo: 'ggml-org/Tiny-GGUF', capabilities: { vision: true, thinking: true, tools: true, mtp: true }, downloads: 12345, likes: 67,
            license: 'apache-2.0', gated: 'auto',
            variants: [
              { label: 'Q4_K_M', format: 'gguf', files: ['t-q4_k_m.gguf'], bytes: 80_000_000, weight_bytes: 80_000_000, projector_bytes: null },
              { label: 'Q8_0', format: 'gguf', files: ['t-q8_0.gguf'], bytes: 140_000_000, weight_bytes: 140_000_000, projector_bytes: null },
            ] }),
          model({ repo: 'someone/mamba', architecture: 'mamba',
            support: { supported: false, family: null, reason: 'this app\'s engine has no model family for the mamba architecture' } }),
        ] };
      }
      if (cmd === 'fit_check') return fit('yellow', 2048);
      if (cmd === 'download_model') return null;
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    expect([...view.el.querySelectorAll('h2')].map((e) => e.textContent)).toContain('Recommended');
    const input = view.el.querySelector<HTMLInputElement>('[data-testid=hub-search-input]')!;
    expect(input.placeholder).toBe('Search the Hugging Face Hub');
    input.value = 'tiny';
    view.el.querySelector<HTMLButtonElement>('[data-testid=hub-search-button]')!.click();
    await tick(); await tick(); await tick();

    const search = calls.find((c) => c.cmd === 'search_hub')!.args as { query: { text: string; file_sizes: boolean } };
    expect(search.query.text).toBe('tiny');
    expect(search.query.file_sizes).toBe(true);

    const card = (repo: string) => view.el.querySelector<HTMLElement>(`[data-testid=hub-result][data-repo="${repo}"]`)!;
    const gguf = card('ggml-org/Tiny-GGUF');
    expect(gguf.querySelector('[data-testid=hub-supported]')!.textContent).toBe('Runs here · Llama');
    for (const b of ['hub-vision', 'hub-thinking', 'hub-tools', 'hub-mtp']) expect(gguf.querySelector(`[data-testid=${b}]`)).not.toBeNull();
    expect(gguf.querySelector('[data-testid=hub-variants]')!.textContent).toBe('Q4_K_M 80.0 MB · Q8_0 140 MB');
    expect(gguf.querySelector('[data-testid=hub-meta]')!.textContent).toBe('llama · ↓ 12,345 · ♥ 67 · license apache-2.0');
    const gated = gguf.querySelector('[data-testid=hub-gated]')!;
    expect(gated.textContent).toMatch(/accept its terms/);
    expect(gated.querySelector('a')!.getAttribute('href')).toBe('https://huggingface.co/org/m');
    const verdict = gguf.querySelector<HTMLElement>('[data-testid=fit]')!;
    expect(verdict.dataset.level).toBe('yellow');
    expect(verdict.querySelector('strong')!.textContent).toBe('Tight: fits only once other programs give memory back (Q4_K_M)');
    expect(verdict.textContent).toMatch(/needs about 2.8 GB = weights 2.0 GB \+ KV cache 500 MB at 4,096 tokens \(8-bit\) \+ runtime 300 MB/);
    expect(verdict.textContent).toMatch(/16.0 GB usable, 8.0 GB free now/);
    expect(gguf.querySelector('[data-testid=fit-max-context]')!.textContent).toBe('largest context that fits: 2,048 tokens');
    expect(calls.filter((c) => c.cmd === 'fit_check').map((c) => c.args))
      .toEqual([{ target: { kind: 'hub', repo: 'ggml-org/Tiny-GGUF', variant: null }, context: null, kvBits: null, maxRunning: null }]);

    // an unsupported architecture says why, offers no download and is not fit-checked
    const mamba = card('someone/mamba');
    expect(mamba.querySelector('[data-testid=hub-unsupported-reason]')!.textContent).toMatch(/no model family for the mamba architecture/);
    expect(mamba.querySelector('[data-testid=hub-download]')).toBeNull();
    expect(mamba.querySelector('[data-testid=fit]')).toBeNull();

    // one quantization of a GGUF repository downloads only its file
    const q8 = [...gguf.querySelectorAll<HTMLButtonElement>('[data-testid=hub-download]')].find((b) => b.dataset.variant === 'Q8_0')!;
    expect(q8.textContent).toBe('Download Q8_0 140 MB');
    q8.click();
    await tick();
    expect(calls.find((c) => c.cmd === 'download_model')!.args).toEqual({ id: 'hf:ggml-org/Tiny-GGUF', files: ['t-q8_0.gguf'] });
    view.el.remove();
  });

  it('says when the search fails, and shows a red verdict with no context that fits', async () => {
    let fail = true;
    mockIPC((cmd) => {
      if (cmd === 'list_models') return emptyGallery;
      if (cmd === 'search_hub') {
        if (fail) throw { code: 'NETWORK_ERROR', message: 'https://huggingface.co/api/models: dns error (https://huggingface.co/api/models)' };
        return { has_more: false, results: [model({ repo: 'big/model' })] };
      }
      if (cmd === 'fit_check') return fit('red', null);
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await view.search.search();
    expect(view.el.querySelector('[data-testid=hub-search-error]')!.textContent).toMatch(/^No connection to Hugging Face\./);
    fail = false;
    await view.search.search();
    await tick(); await tick();
    const verdict = view.el.querySelector<HTMLElement>('[data-repo="big/model"] [data-testid=fit]')!;
    expect(verdict.dataset.level).toBe('red');
    expect(verdict.textContent).toMatch(/Does not fit/);
    expect(verdict.querySelector('[data-testid=fit-max-context]')!.textContent).toBe('no context fits with room to spare');
    view.el.remove();
  });

  it('pages with More results: the next page follows the shown one, each repository once', async () => {
    const queries: { offset: number; limit: number; text: string | null }[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'list_models') return emptyGallery;
      if (cmd === 'search_hub') {
        const q = (args as { query: { offset: number; limit: number; text: string | null } }).query;
        queries.push(q);
        if (q.offset === 0) return { has_more: true, results: [model({ repo: 'a/one' }), model({ repo: 'a/two' })] };
        // the Hub's order moved: a/two comes again, shown once
        return { has_more: false, results: [model({ repo: 'a/two' }), model({ repo: 'a/three' })] };
      }
      if (cmd === 'fit_check') return fit('green', 4096);
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    view.el.querySelector<HTMLInputElement>('[data-testid=hub-search-input]')!.value = 'a';
    await view.search.search();
    const repos = () => [...view.el.querySelectorAll<HTMLElement>('[data-testid=hub-result]')].map((e) => e.dataset.repo);
    expect(repos()).toEqual(['a/one', 'a/two']);
    view.el.querySelector<HTMLButtonElement>('[data-testid=hub-search-more]')!.click();
    await tick(); await tick();
    expect(queries.map((q) => [q.text, q.offset])).toEqual([['a', 0], ['a', 2]]);
    expect(repos()).toEqual(['a/one', 'a/two', 'a/three']);
    expect(view.el.querySelector('[data-testid=hub-search-more]')).toBeNull();
    // a new search starts from the top again
    await view.search.search();
    expect(queries[2].offset).toBe(0);
    expect(repos()).toEqual(['a/one', 'a/two']);
    view.el.remove();
  });

  it('shows the fit of a model on disk before Load, asked again at each refresh', async () => {
    let level: 'green' | 'red' = 'green';
    mockIPC((cmd, args) => {
      if (cmd === 'list_models') {
        return { ...emptyGallery, local: [{ id: 'dir:tiny', name: 'tiny', path: '/m/tiny', format: 'safetensors', architecture: 'llama', supported: true,
          size_bytes: 1, partial: false, error: null, location: { kind: 'models_dir' }, vision: false, thinking: false, tools: false, load_settings: null }] };
      }
      if (cmd === 'fit_check') {
        expect(args).toEqual({ target: { kind: 'local', id: 'dir:tiny' }, context: null, kvBits: null, maxRunning: null });
        return { ...fit(level, level === 'green' ? 32768 : null), variant: null };
      }
    });
    const view = new ModelsView(() => {});
    document.body.append(view.el);
    await view.refresh();
    await tick(); await tick();
    const row = view.el.querySelector('[data-testid=local-model][data-model-id="dir:tiny"]')!;
    expect(row.querySelector<HTMLElement>('[data-testid=fit]')!.dataset.level).toBe('green');
    expect(row.querySelector('[data-testid=fit-max-context]')!.textContent).toBe('largest context that fits: 32,768 tokens');
    expect(row.querySelector('[data-testid=load-model]')).not.toBeNull();
    // Settings changed (a longer context, say): the page asks again when it is opened
    level = 'red';
    await view.refresh();
    await tick(); await tick();
    const again = view.el.querySelector('[data-testid=local-model][data-model-id="dir:tiny"] [data-testid=fit]') as HTMLElement;
    expect(again.dataset.level).toBe('red');
    expect(again.querySelector('strong')!.textContent).toBe('Does not fit this machine');
    view.el.remove();
  });
});
