// The model gallery. "My models" first: the loaded one and every model on
// disk (the Hugging Face cache, the models folder and those added from
// elsewhere with "Add model…" or a drop; load, delete or remove from the
// list, disk use; the user's own first, the built-in default listed once and
// never deleted). Then the Hub search, then the Recommended catalog, each
// card marked by whether it fits this machine and the best fit marked;
// downloads with per-file and total progress, speed, cancel, resume (a failed
// one says why in plain words and offers Retry); a catalog model already on
// disk is offered as Load, not Download. Unsupported architectures are
// marked as such, badges explained on hover.
import { api, errorText, type AppError, type CatalogEntry, type DownloadDone, type DownloadProgress, type EngineStatus, type Gallery, type LocalModel } from './api';
import { downloadErrorText } from './downloadErrors';
import { bytes, percent, rate } from './format';
import { clear, h } from './dom';
import { confirmDialog } from './modal';
import { onMac } from './shortcuts';
import { HubSearch } from './hubSearch';
import type { FitCheck } from './bindings/FitCheck';
import { fitBlock, fitMark } from './fitVerdict';
import { loadSettingsDialog } from './loadSettingsDialog';
import { DRAFTER_WORDS, loadSettingsWords } from './loadSettings';
import { bestFit } from './recommend';

/** "4-bit (group 64)" (the engine's description) in plain words. */
export function quantizationWords(q: string | null | undefined): string {
  if (!q) return 'full precision (not quantized)';
  const bits = [...new Set([...q.matchAll(/(\d+)-bit/g)].map((m) => Number(m[1])))].sort((a, b) => a - b);
  if (bits.length === 0) return q;
  if (bits.length === 1) return `${bits[0]}-bit`;
  return `${bits.slice(0, -1).join('-bit, ')}-bit and ${bits[bits.length - 1]}-bit weights`;
}

const BADGE_HELP = {
  vision: 'Sees images: you can ask it about pictures.',
  thinking: 'Thinks step by step before answering; the reasoning shows apart from the answer.',
  bits: (n: number) => `Weights stored in ${n} bits: smaller and faster than full precision, slightly less exact.`,
  default: 'The model the app starts with.',
  builtIn: 'Comes with the app; it cannot be deleted.',
  loaded: 'This model answers now.',
  onDisk: 'Already on this computer: Load it, no download needed.',
  best: 'The largest recommended model that fits this machine with room to spare.',
  added: 'Added from elsewhere on disk: removing it from the list leaves its files where they are.',
  mtp: 'Its checkpoint ships multi-token-prediction heads: Load settings → Speed up replies can draft with them.',
  drafter: 'Not a chat model: a drafter made for one model. Choose it in that model’s Load settings → Speed up replies.',
};

const isFit = (f: unknown): f is FitCheck => typeof f === 'object' && f !== null && 'level' in f;

/** What "Add model…" asks the system's file dialog for. */
export type PickModel = (kind: 'folder' | 'gguf') => Promise<string | null>;

const badge = (text: string, title: string, cls = '', testid?: string) =>
  h('span', { class: `badge${cls ? ` ${cls}` : ''}`, title, 'data-testid': testid }, text);

export class ModelsView {
  readonly el: HTMLElement;
  private gallery: Gallery | null = null;
  private progress = new Map<string, DownloadProgress>();
  /** Downloads that failed, by catalog id: the card says why until a retry. */
  private failures = new Map<string, AppError>();
  private status: EngineStatus | null = null;
  /** Kept across redraws: its query and results stay while the page redraws. */
  readonly search: HubSearch;
  /** The fit of each model on disk, with the round it was asked in: each
   * refresh (opening the page, a download ending) asks again, since Settings
   * (context, KV bits) and free memory change; the last answer shows meanwhile. */
  private fits = new Map<string, { round: number; fit: FitCheck | AppError | null }>();
  private fitRound = 0;
  /** The fit of each catalog model, by catalog id, asked once a session (a
   * model not on disk is asked through the Hub: its config and file sizes). */
  private catalogFits = new Map<string, FitCheck | AppError | 'checking'>();
  /** Why the last model added could not be, until the next one is. */
  private addError: AppError | null = null;

  constructor(private toast: (m: string) => void, private pickModel: PickModel = async () => null) {
    this.el = h('div', { class: 'page models-page', 'data-testid': 'models-page' });
    this.search = new HubSearch(toast, () => void this.refresh());
  }

  /** Adds model folders or `.gguf` files (a drop, the dialog): each is
   * checked by the app; the first that cannot be added says why here. */
  async addPaths(paths: string[]): Promise<void> {
    this.addError = null;
    for (const path of paths) {
      try {
        const id = await api.addModel(path);
        this.toast(`Added ${path.split(/[\\/]/).pop()} to My models.`);
        this.justAdded = id;
      } catch (e) {
        this.addError ??= e as AppError;
      }
    }
    await this.refresh();
  }

  /** The model added last, scrolled to and marked once it shows. */
  private justAdded: string | null = null;

  /** The best recommended model for this machine, once the fits are known
   * (null while unknown or when none fits with room to spare). */
  async suggestion(): Promise<CatalogEntry | null> {
    if (!this.gallery) await this.refresh();
    const g = this.gallery;
    if (!g) return null;
    await Promise.all(g.catalog.map((c) => this.catalogFit(c)));
    return bestFit(g.catalog, this.knownCatalogFits());
  }

  private knownCatalogFits(): Map<string, FitCheck> {
    const known = new Map<string, FitCheck>();
    for (const [id, f] of this.catalogFits) if (isFit(f)) known.set(id, f);
    return known;
  }

  /** Asks the fit of a catalog model once: at its load settings when on
   * disk, else before its download. The same ask for every caller (the page
   * and the suggestion wait on one answer). */
  private catalogFit(c: CatalogEntry): Promise<void> {
    if (!c.supported || (c.source.kind !== 'hub' && !c.local_id)) return Promise.resolve();
    let asked = this.catalogFitAsked.get(c.id);
    if (!asked) {
      asked = this.askCatalogFit(c);
      this.catalogFitAsked.set(c.id, asked);
    }
    return asked;
  }

  private catalogFitAsked = new Map<string, Promise<void>>();

  private async askCatalogFit(c: CatalogEntry): Promise<void> {
    this.catalogFits.set(c.id, 'checking');
    const target = c.local_id ? { kind: 'local' as const, id: c.local_id }
      : { kind: 'hub' as const, repo: c.source.kind === 'hub' ? c.source.repo : c.id, variant: null };
    try {
      this.catalogFits.set(c.id, await api.fitCheck(target));
    } catch (e) {
      this.catalogFits.set(c.id, e as AppError);
    }
    if (this.el.isConnected) this.render();
  }

  async refresh(): Promise<void> {
    this.fitRound++;
    const asked = ++this.listAsked;
    try {
      const gallery = await api.listModels();
      // Answers can come back out of order (a scan started when the page
      // opened can end after the one a drop asked for, and would take the
      // model just added off the list again): only a newer one replaces it.
      if (asked < this.listShown) return;
      this.listShown = asked;
      this.gallery = gallery;
    } catch (e) {
      this.toast(errorText(e));
    }
    this.render();
  }

  /** The last list asked for, and the one shown (see refresh). */
  private listAsked = 0;
  private listShown = 0;

  setStatus(s: EngineStatus): void {
    this.status = s;
    if (this.el.isConnected) this.render();
  }

  onProgress(p: DownloadProgress): void {
    if (this.search.onProgress(p)) return;
    this.progress.set(p.id, p);
    const bar = this.el.querySelector<HTMLElement>(`[data-download="${CSS.escape(p.id)}"]`);
    if (bar) bar.replaceWith(this.progressBlock(p));
    else if (this.el.isConnected) this.render();
  }

  onDone(d: DownloadDone): void {
    this.search.onDone(d);
    this.progress.delete(d.id);
    if (!d.ok && !d.cancelled && d.error) this.failures.set(d.id, d.error);
    else this.failures.delete(d.id);
    void this.refresh();
  }

  /** Models on disk that see images and can be loaded (not the loaded one). */
  async visionModelsOnDisk(): Promise<{ id: string; name: string }[]> {
    if (!this.gallery) await this.refresh();
    return (this.gallery?.local ?? [])
      .filter((m) => m.vision && m.supported && !m.partial && !m.error && m.id !== this.status?.model?.id)
      .map((m) => ({ id: m.id, name: m.name }));
  }

  /** The built-in default model's disk id, when it is on disk. */
  private builtInId(): string | null {
    return this.gallery?.catalog.find((c) => c.is_default)?.local_id ?? null;
  }

  private render(): void {
    clear(this.el);
    const g = this.gallery;
    this.el.append(h('div', { class: 'page-title-row' },
      h('h1', {}, 'Models'),
      h('div', { class: 'add-model', role: 'group', 'aria-label': 'Add a model from this computer' },
        h('button', { 'data-testid': 'add-model-folder', title: 'A folder in the Hugging Face / MLX layout: config.json, *.safetensors, tokenizer.json', onclick: () => void this.addPicked('folder') }, 'Add model folder…'),
        h('button', { 'data-testid': 'add-model-gguf', title: 'A single-file model', onclick: () => void this.addPicked('gguf') }, 'Add .gguf file…'))));
    this.el.append(h('p', { class: 'muted small drop-hint' }, 'Or drop a model folder or a .gguf file on this page.'));
    if (this.addError) {
      this.el.append(h('div', { class: 'error-note', role: 'alert', 'data-testid': 'add-model-error', 'data-code': this.addError.code }, errorText(this.addError)));
    }

    this.el.append(h('h2', {}, 'My models'));
    this.el.append(this.loadedCard());
    if (!g) return;
    const place = onMac() ? 'On this Mac' : 'On this computer';
    this.el.append(h('p', { class: 'muted', 'data-testid': 'disk-summary' },
      `${place}: ${bytes(g.disk_bytes)} in ${g.local.length} model${g.local.length === 1 ? '' : 's'} · ${g.models_dir}${g.hf_cache_dir ? ` · ${g.hf_cache_dir}` : ''}`));
    const builtIn = this.builtInId();
    const fromCatalog = new Set(g.catalog.map((c) => c.local_id).filter((id): id is string => !!id));
    // the user's own models first, then catalog downloads, the built-in one last
    const rank = (l: LocalModel) => (l.id === builtIn ? 2 : fromCatalog.has(l.id) ? 1 : 0);
    const local = [...g.local].sort((a, b) => rank(a) - rank(b));
    const table = h('div', { class: 'local-list', 'data-testid': 'local-models' });
    for (const l of local) table.append(this.localRow(l, l.id === builtIn));
    if (g.local.length === 0) table.append(h('p', { class: 'muted' }, 'No models on disk yet: download one below, or add one you have.'));
    this.el.append(table);

    this.el.append(this.search.el);

    // the built-in model is listed once: with the models on disk, when it is there
    const catalog = g.catalog.filter((c) => !(c.is_default && c.local_id));
    for (const c of catalog) void this.catalogFit(c);
    const best = bestFit(catalog, this.knownCatalogFits());
    this.el.append(h('h2', {}, 'Recommended'));
    const grid = h('div', { class: 'model-grid', 'data-testid': 'catalog' });
    for (const c of catalog) grid.append(this.catalogCard(c, c.id === best?.id));
    this.el.append(grid);
    if (this.justAdded) {
      const added = this.justAdded;
      const row = [...this.el.querySelectorAll<HTMLElement>('[data-testid=local-model]')].find((r) => r.dataset.modelId === added);
      row?.classList.add('just-added');
      row?.scrollIntoView?.({ block: 'nearest' });
      this.justAdded = null;
    }
  }

  private loadedCard(): HTMLElement {
    const s = this.status;
    const m = s?.model;
    return h('section', { class: 'card loaded-card', 'data-testid': 'loaded-model', 'aria-label': 'Loaded model' },
      h('div', {},
        h('div', { class: 'label' }, 'Loaded'),
        h('div', { class: 'title-row' },
          h('span', { class: 'title' }, s?.state === 'loading' ? `Loading ${s.loading}…` : m?.name ?? 'No model loaded'),
          m?.vision ? badge('Vision', BADGE_HELP.vision, '', 'vision-badge') : null,
          m?.thinking ? badge('Thinking', BADGE_HELP.thinking, '', 'thinking-badge') : null),
        m ? h('div', { class: 'muted', 'data-testid': 'loaded-details' },
          `${m.quantization_words ?? quantizationWords(m.quantization)} · ${m.architecture} · context ${m.max_context.toLocaleString()} tokens${m.vision ? '' : ' · reads text only'}`) : null,
        s?.error ? h('div', { class: 'error-note' }, s.error.message) : null,
        !m && s?.idle_unloaded && s.state !== 'loading' ? h('div', { class: 'muted', 'data-testid': 'idle-unloaded' },
          `${s.idle_unloaded.name} was unloaded after the idle time (Settings) to free memory; your next message loads it again.`) : null),
      s?.state === 'loading' ? h('div', { class: 'spinner', role: 'progressbar', 'aria-label': 'Loading' }) :
        m ? h('button', { 'data-testid': 'unload-model', onclick: () => void this.act(() => api.unloadModel()) }, 'Unload') : null);
  }

  private async addPicked(kind: 'folder' | 'gguf'): Promise<void> {
    let path: string | null;
    try { path = await this.pickModel(kind); } catch (e) { this.toast(errorText(e)); return; }
    if (path) await this.addPaths([path]);
  }

  private catalogCard(m: CatalogEntry, best: boolean): HTMLElement {
    const loaded = this.status?.model?.id === m.local_id && m.local_id != null;
    const p = this.progress.get(m.id);
    const failed = this.failures.get(m.id);
    let action: HTMLElement;
    if (!m.supported) action = badge(`${m.architecture}: not supported yet`, 'The engine cannot run this architecture yet.', 'warn');
    else if (loaded) action = badge('Loaded', BADGE_HELP.loaded, 'ok');
    else if (m.local_id) action = h('button', { class: 'primary', 'data-testid': 'catalog-load', 'aria-label': `Load ${m.display_name}`, onclick: () => void this.load(m.local_id!) }, 'Load');
    else if (m.downloading || p) action = h('button', { onclick: () => void this.act(() => api.cancelDownload(m.id)) }, 'Cancel');
    else if (m.source.kind === 'hub') action = h('button', { 'data-testid': failed ? 'retry-download' : 'download', onclick: () => void this.download(m.id) }, failed ? 'Retry' : m.partial ? 'Resume download' : 'Download');
    else action = h('span', { class: 'warn-text small' }, 'The built-in model file is missing from the models folder.');
    const fit = this.catalogFits.get(m.id);
    // a Hub entry's size is the catalog's estimate; the fit's numbers are exact
    const size = m.source.kind === 'hub' ? `≈ ${bytes(m.size_bytes)}` : bytes(m.size_bytes);
    return h('div', { class: `card model-card${m.supported ? '' : ' unsupported'}${best ? ' best-fit' : ''}`, 'data-testid': 'catalog-model', 'data-model-id': m.id },
      h('h3', { class: 'title' }, m.display_name),
      h('div', { class: 'badges' },
        m.local_id ? badge('On disk', BADGE_HELP.onDisk, 'ok', 'on-disk') : null,
        best ? badge('Best fit here', BADGE_HELP.best, 'ok', 'best-fit') : null,
        isFit(fit) ? fitMark(fit) : null,
        m.vision ? badge('Vision', BADGE_HELP.vision) : null,
        m.thinking ? badge('Thinking', BADGE_HELP.thinking) : null,
        badge(`${m.bits}-bit`, BADGE_HELP.bits(m.bits), 'subtle'),
        m.is_default ? badge('Default', BADGE_HELP.default, 'subtle') : null),
      h('div', { class: 'muted' }, `${size} · context ${m.context_length.toLocaleString()} · ${m.architecture}`),
      p ? this.progressBlock(p) : null,
      failed && !p ? h('div', { class: 'error-note', role: 'alert', 'data-testid': 'download-error', 'data-code': failed.code }, downloadErrorText(failed)) : null,
      h('div', { class: 'card-actions' }, action));
  }

  private progressBlock(p: DownloadProgress): HTMLElement {
    return h('div', { class: 'download', 'data-download': p.id },
      h('progress', { max: 100, value: percent(p.bytes_done, p.bytes_total) }),
      h('div', { class: 'muted small' },
        `${bytes(p.bytes_done)} / ${bytes(p.bytes_total)} · ${rate(p.bytes_per_second)} · file ${Math.min(p.files_done + 1, p.files_total)}/${p.files_total}`),
      h('div', { class: 'muted small' }, `${p.file}: ${percent(p.file_bytes_done, p.file_bytes_total)}%`));
  }

  private localRow(m: LocalModel, builtIn: boolean): HTMLElement {
    const loaded = this.status?.model?.id === m.id;
    const why = m.error ?? (m.partial ? 'download not finished' : m.drafter ? null : !m.supported ? `${m.architecture ?? 'unknown'} architecture not supported` : null);
    const deletable = !builtIn && m.location.kind !== 'user_file' && !loaded;
    return h('div', { class: 'local-row', 'data-testid': 'local-model', 'data-model-id': m.id },
      h('div', { class: 'local-main' },
        h('div', { class: 'title-row' },
          h('span', { class: 'title' }, m.name),
          m.vision ? badge('Vision', BADGE_HELP.vision, '', 'vision-badge') : null,
          m.mtp_heads ? badge('MTP heads', BADGE_HELP.mtp, '', 'mtp-badge') : null,
          m.drafter ? badge(DRAFTER_WORDS[m.drafter], BADGE_HELP.drafter, 'subtle', 'drafter-badge') : null,
          builtIn ? badge('Built in', BADGE_HELP.builtIn, 'subtle', 'built-in-badge') : null,
          m.location.kind === 'user_file' ? badge('Added', BADGE_HELP.added, 'subtle', 'added-badge') : null),
        h('div', { class: 'muted small' }, `${m.format.toUpperCase()} · ${m.architecture ?? '?'} · ${bytes(m.size_bytes)} · ${m.path}`),
        why ? h('div', { class: 'warn-text small' }, why) : null,
        m.drafter && !why ? h('div', { class: 'muted small', 'data-testid': 'drafter-note' }, BADGE_HELP.drafter) : null,
        m.load_settings ? h('div', { class: 'muted small', 'data-testid': 'own-load-settings' },
          `Loads with its own settings: ${loadSettingsWords(m.load_settings)}`) : null,
        m.supported && !m.partial && !m.error ? this.localFit(m) : null),
      h('div', { class: 'row-actions' },
        loaded ? badge('Loaded', BADGE_HELP.loaded, 'ok')
          : m.supported ? h('button', { class: 'primary', 'data-testid': 'load-model', 'aria-label': `Load ${m.name}`, onclick: () => void this.load(m.id) }, 'Load') : null,
        m.supported && !m.partial && !m.error ? h('button', { 'data-testid': 'load-settings', 'aria-label': `Load settings of ${m.name}`,
          title: 'Context, KV-cache quantization and running sequences for this model', onclick: () => void this.editLoadSettings(m, loaded) }, 'Load settings') : null,
        deletable ? h('button', { class: 'danger-text', 'data-testid': 'delete-model', 'aria-label': `Delete ${m.name}`, onclick: () => void this.remove(m) }, 'Delete') : null,
        m.location.kind === 'user_file' && !loaded ? h('button', { 'data-testid': 'remove-added-model', 'aria-label': `Remove ${m.name} from the list`,
          title: BADGE_HELP.added, onclick: () => void this.removeAdded(m) }, 'Remove from list') : null));
  }

  /** The fit verdict of a model on disk at its load settings (its own, else Settings'); asked each refresh. */
  private localFit(m: LocalModel): HTMLElement | null {
    const known = this.fits.get(m.id);
    if (!known || known.round < this.fitRound) {
      const round = this.fitRound;
      this.fits.set(m.id, { round, fit: known?.fit ?? null });
      void api.fitCheck({ kind: 'local', id: m.id })
        .then((f) => this.fits.set(m.id, { round, fit: f }), (e) => this.fits.set(m.id, { round, fit: e as AppError }))
        .then(() => { if (this.el.isConnected) this.render(); });
    }
    const fit = known?.fit;
    if (!fit) return null;
    if ('level' in fit) return fitBlock(fit);
    return h('div', { class: 'muted small', 'data-testid': 'fit-error' }, `No fit estimate: ${fit.message}`);
  }

  private async editLoadSettings(m: LocalModel, loaded: boolean): Promise<void> {
    const outcome = await loadSettingsDialog({ id: m.id, name: m.name }, loaded, this.toast);
    if (outcome === 'reloaded') this.toast(`Reloaded ${m.name} with its new load settings.`);
    if (outcome) {
      this.search.refit(m.id);
      await this.refresh();
    }
  }

  private async load(id: string): Promise<void> {
    await this.act(() => api.loadModel(id));
  }

  private async download(id: string): Promise<void> {
    this.failures.delete(id);
    await this.act(() => api.downloadModel(id));
    await this.refresh();
  }

  private async remove(m: LocalModel): Promise<void> {
    if (!await confirmDialog('Delete this model?', `${m.name} (${bytes(m.size_bytes)}) will be removed from disk.`, 'Delete')) return;
    await this.act(async () => { const freed = await api.deleteModel(m.id); this.toast(`Freed ${bytes(freed)}`); });
    await this.refresh();
  }

  private async removeAdded(m: LocalModel): Promise<void> {
    await this.act(async () => { await api.removeAddedModel(m.id); this.toast(`Removed ${m.name} from the list; its files stay where they are.`); });
    await this.refresh();
  }

  private async act(f: () => Promise<unknown>): Promise<void> {
    try { await f(); } catch (e) { this.toast(errorText(e)); }
  }
}
