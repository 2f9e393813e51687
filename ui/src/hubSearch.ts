// Search of the Hugging Face Hub on the Models page: each result says
// whether our engine runs it (and why not), what it can do, its size per
// quantization, downloads and likes, license and gated state (with its page
// to accept the terms), and whether it fits this machine (checked before
// any download). A supported result downloads by its `hf:<repo>` id.
import { api, errorText, type AppError, type DownloadDone, type DownloadProgress } from './api';
import type { FitCheck } from './bindings/FitCheck';
import type { HubModel } from './bindings/HubModel';
import type { SearchQuery } from './bindings/SearchQuery';
import type { Variant } from './bindings/Variant';
import { downloadErrorText, searchErrorText } from './downloadErrors';
import { fitBlock } from './fitVerdict';
import { bytes, percent, rate } from './format';
import { clear, h } from './dom';

function variantText(v: Variant): string {
  return v.bytes == null ? v.label : `${v.label} ${bytes(v.bytes)}`;
}

const badge = (text: string, title: string, cls = '', testid?: string) =>
  h('span', { class: `badge${cls ? ` ${cls}` : ''}`, title, 'data-testid': testid }, text);

/** Results a page asks for. */
const PAGE_SIZE = 20;

/** The shown results with a next page after them; a repository the Hub lists
 * again (its order moved between the two asks) is shown once, where it was. */
export function appendPage(shown: HubModel[], page: HubModel[]): HubModel[] {
  const seen = new Set(shown.map((m) => m.repo));
  return [...shown, ...page.filter((m) => !seen.has(m.repo))];
}

export class HubSearch {
  readonly el: HTMLElement;
  private input: HTMLInputElement;
  private format: HTMLSelectElement;
  private visionOnly: HTMLInputElement;
  private list: HTMLElement;
  private results: HubModel[] = [];
  /** The Hub has results past those shown ("More results"). */
  private hasMore = false;
  private error: string | null = null;
  /** A first page is asked ('new'), or the next one ('more'). */
  private searching: 'new' | 'more' | null = null;
  /** Fit verdicts by repo (or why there is none). */
  private fits = new Map<string, FitCheck | AppError | 'checking'>();
  /** The search shown, for its next page. */
  private query: SearchQuery | null = null;
  private progress = new Map<string, DownloadProgress>();
  private failures = new Map<string, AppError>();
  private done = new Set<string>();

  constructor(private toast: (m: string) => void, private onDownloaded: () => void) {
    this.input = h('input', { type: 'search', placeholder: 'Search the Hugging Face Hub', 'aria-label': 'Search the Hugging Face Hub', 'data-testid': 'hub-search-input' });
    this.input.addEventListener('keydown', (e) => { if (e.key === 'Enter') void this.search(); });
    this.format = h('select', { 'aria-label': 'Weights format', 'data-testid': 'hub-search-format' },
      h('option', { value: 'any' }, 'Any format'), h('option', { value: 'mlx' }, 'MLX'), h('option', { value: 'gguf' }, 'GGUF'));
    this.visionOnly = h('input', { type: 'checkbox', 'data-testid': 'hub-search-vision' });
    this.list = h('div', { class: 'hub-results', 'data-testid': 'hub-results' });
    this.el = h('section', { class: 'hub-search', 'aria-label': 'Search the Hugging Face Hub' },
      h('h2', {}, 'Search the Hugging Face Hub'),
      h('div', { class: 'hub-search-form' }, this.input, this.format,
        h('label', { class: 'small' }, this.visionOnly, ' Sees images'),
        h('button', { class: 'primary', 'data-testid': 'hub-search-button', onclick: () => void this.search() }, 'Search')),
      this.list);
  }

  async search(): Promise<void> {
    this.query = {
      text: this.input.value.trim() || null, author: null, format: this.format.value as 'any' | 'mlx' | 'gguf',
      vision_only: this.visionOnly.checked, sort: 'downloads', limit: PAGE_SIZE, offset: 0, file_sizes: true,
    };
    await this.fetch('new');
  }

  /** The next page of the same search, after the results shown. */
  async more(): Promise<void> {
    if (!this.query || this.searching) return;
    this.query = { ...this.query, offset: this.results.length };
    await this.fetch('more');
  }

  private async fetch(kind: 'new' | 'more'): Promise<void> {
    const query = this.query!;
    this.searching = kind;
    this.error = null;
    this.render();
    try {
      const page = await api.searchHub(query);
      this.results = appendPage(kind === 'new' ? [] : this.results, page.results);
      this.hasMore = page.has_more;
    } catch (e) {
      if (kind === 'new') this.results = [];
      this.hasMore = kind === 'more' && this.hasMore;
      this.error = searchErrorText(e);
    }
    this.searching = null;
    this.render();
    // the fit of each model the engine runs, before anything is downloaded
    for (const m of this.results) if (m.support.supported && !this.fits.has(m.repo)) void this.checkFit(m);
  }

  onProgress(p: DownloadProgress): boolean {
    if (!this.results.some((m) => `hf:${m.repo}` === p.id)) return false;
    this.progress.set(p.id, p);
    this.render();
    return true;
  }

  onDone(d: DownloadDone): void {
    if (!this.results.some((m) => `hf:${m.repo}` === d.id)) return;
    this.progress.delete(d.id);
    if (d.ok) this.done.add(d.id);
    else if (!d.cancelled && d.error) this.failures.set(d.id, d.error);
    this.render();
  }

  /** A model's load settings changed (`hf:<repo>` on disk): its verdict here is asked again. */
  refit(id: string): void {
    const m = this.results.find((r) => `hf:${r.repo}` === id);
    if (m?.support.supported) void this.checkFit(m);
  }

  private async checkFit(m: HubModel): Promise<void> {
    this.fits.set(m.repo, 'checking');
    this.render();
    try {
      this.fits.set(m.repo, await api.fitCheck({ kind: 'hub', repo: m.repo, variant: null }));
    } catch (e) {
      this.fits.set(m.repo, e as AppError);
    }
    this.render();
  }

  private render(): void {
    clear(this.list);
    if (this.searching === 'new') { this.list.append(h('p', { class: 'muted', role: 'status' }, 'Searching…')); return; }
    if (this.error && this.results.length === 0) { this.list.append(h('p', { class: 'error-note', role: 'alert', 'data-testid': 'hub-search-error' }, this.error)); return; }
    for (const m of this.results) this.list.append(this.card(m));
    if (this.error) this.list.append(h('p', { class: 'error-note', role: 'alert', 'data-testid': 'hub-search-error' }, this.error));
    if (this.searching === 'more') this.list.append(h('p', { class: 'muted', role: 'status' }, 'Loading more results…'));
    else if (this.hasMore) {
      this.list.append(h('button', { class: 'more-results', 'data-testid': 'hub-search-more', onclick: () => void this.more() }, 'More results'));
    }
  }

  private card(m: HubModel): HTMLElement {
    const id = `hf:${m.repo}`;
    const fit = this.fits.get(m.repo);
    const p = this.progress.get(id);
    const failed = this.failures.get(id);
    const gated = m.gated !== 'no';
    let action: HTMLElement | null = null;
    if (this.done.has(id)) action = h('span', { class: 'badge', 'data-testid': 'hub-downloaded' }, 'Downloaded: load it under “On this computer”');
    else if (p) action = h('button', { onclick: () => void this.act(() => api.cancelDownload(id)) }, 'Cancel');
    else if (m.support.supported) {
      action = h('div', { class: 'card-actions' }, ...m.variants.map((v) =>
        h('button', { 'data-testid': 'hub-download', 'data-variant': v.label, title: v.files.join(', '),
          onclick: () => void this.download(id, m.variants.length > 1 ? v.files : null) }, `Download ${variantText(v)}`)));
    }
    return h('div', { class: `card hub-result${m.support.supported ? '' : ' unsupported'}`, 'data-testid': 'hub-result', 'data-repo': m.repo },
      h('div', { class: 'title-row' },
        h('h3', { class: 'title' }, m.repo),
        m.support.supported
          ? badge(`Runs here · ${m.support.family ?? m.architecture ?? ''}`, 'Our engine has this model family.', '', 'hub-supported')
          : badge('Not supported', m.support.reason ?? '', 'warn', 'hub-unsupported')),
      m.support.supported ? null : h('div', { class: 'warn-text small', 'data-testid': 'hub-unsupported-reason' }, m.support.reason ?? 'not supported'),
      h('div', { class: 'badges' },
        m.capabilities.vision ? badge('Vision', 'Sees images (from the Hub\'s metadata).', '', 'hub-vision') : null,
        m.capabilities.thinking ? badge('Thinking', 'Its chat template can reason before answering.', '', 'hub-thinking') : null,
        m.capabilities.tools ? badge('Tools', 'Its chat template can call tools.', '', 'hub-tools') : null,
        m.capabilities.mtp ? badge('MTP heads', 'Ships multi-token-prediction heads (its config.json names MTP layers; not an MLX conversion, which drops them): once on disk, Speed up replies can draft with them.', '', 'hub-mtp') : null),
      h('div', { class: 'muted small', 'data-testid': 'hub-meta' },
        [`${m.architecture ?? 'unknown architecture'}`, `↓ ${m.downloads.toLocaleString()}`, `♥ ${m.likes.toLocaleString()}`,
          m.license ? `license ${m.license}` : 'no license given'].join(' · ')),
      m.variants.length ? h('div', { class: 'muted small', 'data-testid': 'hub-variants' }, m.variants.map(variantText).join(' · ')) : null,
      gated ? h('div', { class: 'warn-text small', 'data-testid': 'hub-gated' },
        m.gated === 'manual' ? 'Gated: the authors review each request. ' : 'Gated: accept its terms on the Hub first, and set a token in Settings. ',
        h('a', { href: m.url, onclick: (e: Event) => { e.preventDefault(); void this.act(() => api.openLink(m.url)); } }, 'Open its page')) : null,
      fit === 'checking' ? h('div', { class: 'muted small', 'data-testid': 'fit-checking' }, 'Checking whether it fits…')
        : fit && 'level' in fit ? fitBlock(fit)
        : fit ? h('div', { class: 'muted small', 'data-testid': 'fit-error' }, `No fit estimate: ${fit.message}`) : null,
      p ? h('div', { class: 'download', 'data-download': id },
        h('progress', { max: 100, value: percent(p.bytes_done, p.bytes_total) }),
        h('div', { class: 'muted small' }, `${bytes(p.bytes_done)} / ${bytes(p.bytes_total)} · ${rate(p.bytes_per_second)}`)) : null,
      failed && !p ? h('div', { class: 'error-note', role: 'alert', 'data-testid': 'download-error', 'data-code': failed.code }, downloadErrorText(failed)) : null,
      action);
  }

  private async download(id: string, files: string[] | null): Promise<void> {
    this.failures.delete(id);
    this.done.delete(id);
    await this.act(() => api.downloadModel(id, files));
    this.onDownloaded();
  }

  private async act(f: () => Promise<unknown>): Promise<void> {
    try { await f(); } catch (e) { this.toast(errorText(e)); }
  }
}
