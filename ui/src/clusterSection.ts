// Settings → Split models across machines (src-tauri/src/cluster.rs): this
// Mac (this computer, elsewhere) as rank 0 of an MLX ring, the other machines running
// `vlm serve --distributed … --split <how> --ring-secret-file …` (every rank
// splits the same way: pipeline, tensor parallel, or auto; only ranks that
// hold the ring secret the app made can join). A line per rank says what rank 0
// knows: waiting for the others to join, joined (with each rank's memory,
// and this Mac's share of the model), or lost (the engine cannot tell which
// rank was lost). MLX joins one ring per app run, so changing the ring, or
// loading a split model again, needs the app restarted: the section says so.
import { api, errorText, type Settings } from './api';
import type { ClusterSettings } from './bindings/ClusterSettings';
import type { ClusterSplit } from './bindings/ClusterSplit';
import type { ClusterState } from './bindings/ClusterState';
import type { ClusterStatus } from './bindings/ClusterStatus';
import type { RankLine } from './bindings/RankLine';
import { clear, h } from './dom';
import { bytes } from './format';
import { onMac } from './shortcuts';

/** How the section names machines: "this Mac" on a Mac, "this computer"
 * elsewhere (a Linux user was told of "this Mac" and "/Users/me"). */
export interface MachineWords { thisOne: string; one: string; many: string; home: string }

export function machineWords(mac = onMac()): MachineWords {
  return mac ? { thisOne: 'this Mac', one: 'Mac', many: 'Macs', home: '/Users/me' }
    : { thisOne: 'this computer', one: 'machine', many: 'machines', home: '/home/me' };
}

/** The warning for a ring turned on with no other machine in it. */
export function noMachinesWarning(c: Pick<ClusterSettings, 'enabled' | 'hostfile' | 'hosts'>, w: MachineWords = machineWords()): string | null {
  if (!c.enabled || c.hostfile.trim() !== '' || c.hosts.length > 1) return null;
  return c.hosts.length === 1
    ? `Only one host is listed: add a line for each other ${w.one} (${w.thisOne} first), or nothing is split.`
    : `No other ${w.many} yet: list them under Hosts (${w.thisOne} first) or give a hostfile, or nothing is split.`;
}

/** How often the rank lines are asked for while the section shows a ring. */
export const CLUSTER_POLL_MS = 2000;

/** The ways to split, as the choice lists them. */
export const SPLITS: [ClusterSplit, string][] = [
  ['auto', 'Auto'],
  ['tensor', 'Tensor parallel'],
  ['pipeline', 'Pipeline'],
];

/** What the split choice means, in plain words. */
export function splitHint(w: MachineWords = machineWords()): string {
  return `Pipeline: each ${w.one} runs a range of the model’s layers, one exchange per token per ${w.one}; works for every model, and is the one for Ethernet or Wi‑Fi. `
    + `Tensor parallel: every layer is split across the ${w.many}, two exchanges per layer; needs a fast link (Thunderbolt). `
    + 'Auto picks tensor parallel when the model allows it, pipeline otherwise.';
}

/** The ring secret's file, in the data folder here and beside the hostfile
 * on the other machines (src-tauri/src/cluster_secret.rs). */
export const RING_SECRET_NAME = 'cluster-ring.secret';

/** The hostfile the app writes from the hosts (cluster.rs' HOSTFILE_NAME). */
export const HOSTFILE_NAME = 'cluster-hostfile.json';

/** `word` as one word for a POSIX shell: quoted unless it is plain. */
export function shellWord(word: string): string {
  return /^[A-Za-z0-9_\-./:@%+=,]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

/** The name of the hostfile the other machines get a copy of: the one
 * named in Settings, or the one the app writes from the hosts. */
export function hostfileName(c: Pick<ClusterSettings, 'hostfile'>): string {
  const named = c.hostfile.trim();
  return named === '' ? HOSTFILE_NAME : named.split('/').filter((p) => p !== '').pop() ?? named;
}

/** What another machine runs to join as rank `rank` (a number, or "N" for
 * any), in the folder where the hostfile and the ring secret were copied: the
 * secret goes by its file, never on the command line (shell history, `ps`). */
export function followerCommand(rank: number | 'N', split: ClusterSplit, hostfile: string): string {
  return `vlm serve --model <the same model folder> --distributed ${shellWord(hostfile)} --rank ${rank} --split ${split} --ring-secret-file ${RING_SECRET_NAME}`;
}

/** A rank's memory in words, when rank 0 has gathered it: "3.9 GB weights · 120 MB KV". */
export function memoryWords(r: Pick<RankLine, 'weights_bytes' | 'kv_bytes'>): string | null {
  const parts: string[] = [];
  if (r.weights_bytes != null) parts.push(`${bytes(r.weights_bytes)} weights`);
  if (r.kv_bytes != null) parts.push(`${bytes(r.kv_bytes)} KV`);
  return parts.length ? parts.join(' · ') : null;
}

/** The hosts typed one per line: blank lines left out, spaces trimmed. */
export function parseHosts(text: string): string[] {
  return text.split('\n').map((l) => l.trim()).filter((l) => l !== '');
}

/** A ring state in words. */
export function stateWords(state: ClusterState): string {
  switch (state) {
    case 'not_joined': return 'not joined yet (joins when a model loads)';
    case 'waiting': return 'waiting to join…';
    case 'joined': return 'joined';
    case 'failed': return 'did not join';
    case 'lost': return 'lost';
    case 'left': return 'stopped (the split model was unloaded)';
  }
}

/** What to show for one rank. */
export interface RankView {
  rank: number;
  who: string;
  state: ClusterState;
  /** Who, the state and its memory when known. */
  text: string;
  /** This Mac's share of the model ("layers 4..8 of 8, pipeline rank 0 of 2"). */
  share: string | null;
  /** What to run on that Mac, until the ring has joined. */
  command: string | null;
  /** How to copy the hostfile and the ring secret there, until it has joined. */
  copyCommand: string | null;
}

/** One line per rank: who it is, its state as rank 0 knows it, its memory. */
export function rankLines(s: ClusterStatus, w: MachineWords = machineWords()): RankView[] {
  return s.ranks.map((r) => {
    const who = r.this_mac ? w.thisOne : r.addresses.join(', ');
    const memory = memoryWords(r);
    const text = `Rank ${r.rank} · ${who} — ${stateWords(r.state)}${memory ? ` · ${memory}` : ''}`;
    const waiting = r.state === 'not_joined' || r.state === 'waiting' || r.state === 'failed';
    return {
      rank: r.rank, who, state: r.state, text, share: r.share ?? null,
      command: waiting ? r.command ?? null : null, copyCommand: waiting ? r.copy_command ?? null : null,
    };
  });
}

/** What to say under the lines (an error, what to do). */
export function clusterNotes(s: ClusterStatus, w: MachineWords = machineWords()): string[] {
  const notes: string[] = [];
  if (s.state === 'lost') notes.push(`A rank stopped answering; ${w.thisOne} (rank 0) cannot tell which one. Messages fail until the split model loads again.`);
  if (s.error) notes.push(s.error.message);
  if (s.restart_needed) notes.push(`To join a ring again, quit and reopen the app, and restart \`vlm serve --distributed … --split ${s.split}\` on the other machines.`);
  return notes;
}

export class ClusterSection {
  readonly el: HTMLElement;
  private lines = h('ul', { class: 'cluster-ranks', role: 'status', 'aria-live': 'polite', 'data-testid': 'cluster-ranks' });
  private notes = h('div', { 'data-testid': 'cluster-notes' });
  private timer = 0;

  /**
   * `settings` gives the page's draft; `changed(soon)` saves it (`soon`:
   * after the typing delay).
   */
  private warning = h('div', { class: 'warn-note', role: 'alert', 'data-testid': 'cluster-no-hosts', hidden: true });

  constructor(private settings: () => Settings, private changed: (soon: boolean) => void, private w: MachineWords = machineWords()) {
    const c = this.cluster();
    const toggle = h('input', { id: 'setting-cluster-enabled', type: 'checkbox', class: 'switch', checked: c.enabled, 'data-testid': 'setting-cluster-enabled', 'aria-describedby': 'cluster-enabled-hint' });
    toggle.addEventListener('change', () => { this.cluster().enabled = toggle.checked; this.warn(); this.changed(false); });
    const hostfile = h('input', { id: 'setting-cluster-hostfile', type: 'text', value: c.hostfile, placeholder: `${w.home}/hostfile.json`, spellcheck: 'false', 'data-testid': 'setting-cluster-hostfile', 'aria-describedby': 'cluster-hostfile-hint' });
    hostfile.addEventListener('input', () => { this.cluster().hostfile = hostfile.value; showSplit(); this.warn(); this.changed(true); });
    const hosts = h('textarea', { id: 'setting-cluster-hosts', rows: 3, spellcheck: 'false', placeholder: '192.168.1.10:5000\n192.168.1.11:5000', 'data-testid': 'setting-cluster-hosts', 'aria-describedby': 'cluster-hosts-hint' });
    hosts.value = c.hosts.join('\n');
    hosts.addEventListener('input', () => { this.cluster().hosts = parseHosts(hosts.value); this.warn(); this.changed(true); });
    const split = h('select', { id: 'setting-cluster-split', 'data-testid': 'setting-cluster-split', 'aria-describedby': 'cluster-split-hint' },
      ...SPLITS.map(([value, label]) => h('option', { value, selected: c.split === value }, label)));
    const sameSplit = h('code', { 'data-testid': 'cluster-split-command' });
    const enabledCommand = h('code', {});
    const showSplit = () => {
      const how = this.cluster().split;
      sameSplit.textContent = `--split ${how}`;
      enabledCommand.textContent = followerCommand('N', how, hostfileName(this.cluster()));
    };
    showSplit();
    split.addEventListener('change', () => { this.cluster().split = split.value as ClusterSplit; showSplit(); this.changed(false); });
    const timeout = h('input', { id: 'setting-cluster-timeout', type: 'number', min: 1, max: 3600, step: 1, value: String(c.join_timeout_secs), 'data-testid': 'setting-cluster-timeout', 'aria-describedby': 'cluster-timeout-hint' });
    timeout.addEventListener('input', () => { if (timeout.value !== '') { this.cluster().join_timeout_secs = Number(timeout.value); this.changed(true); } });
    const field = (id: string, label: string, hintId: string, hint: string | HTMLElement, kind: string, input: HTMLElement) =>
      h('div', { class: `field field-${kind}` }, h('label', { for: id }, label, h('span', { class: 'hint', id: hintId }, hint)), input);
    this.el = h('section', { class: 'card settings-section', 'data-testid': 'cluster-section' },
      h('h2', {}, 'Split models across machines'),
      field('setting-cluster-enabled', 'Split models across machines', 'cluster-enabled-hint',
        h('span', {}, `A model too large for ${w.thisOne} runs split across several ${w.many} (Thunderbolt, Ethernet or Wi‑Fi): ${w.thisOne} is rank 0 and answers; each other ${w.one} runs `, enabledCommand,
          `, in a folder holding copies of the hostfile and of the ring secret (${RING_SECRET_NAME}, made by the app in its data folder: only ${w.many} that hold it can join). Any model splits as a pipeline, text or vision, a .gguf file too, each ${w.one} running layers in proportion to its memory; tensor parallel needs a safetensors folder of a Llama, Qwen2 or Qwen3 model. Takes effect at the next model load.`), 'toggle', toggle),
      this.warning,
      field('setting-cluster-hostfile', 'Hostfile', 'cluster-hostfile-hint',
        `Full path of an MLX ring hostfile (what mlx.launch writes: one list of "ip:port" per rank, rank 0 = ${w.thisOne}). Leave empty to use the hosts below.`, 'text', hostfile),
      field('setting-cluster-hosts', 'Hosts', 'cluster-hosts-hint',
        `Or one "ip:port" per line, one line per rank, ${w.thisOne} first. The app writes them as a hostfile (${HOSTFILE_NAME}) into its data folder, beside the ring secret: copy both to the other ${w.many}.`, 'text', hosts),
      field('setting-cluster-split', 'How to split', 'cluster-split-hint',
        h('span', {}, splitHint(w), ` Every ${w.one} must split the same way: run the others with `, sameSplit, '.'), 'select', split),
      field('setting-cluster-timeout', 'Join timeout (seconds)', 'cluster-timeout-hint',
        `How long loading waits for the other ${w.many} to join (they may still be loading their share). A ${w.one} lost later shows here when the next answer fails: ${w.thisOne} learns of it only then.`, 'number', timeout),
      h('div', { class: 'note' }, `MLX joins one ring per run of the app: after changing the ring, or to load a split model again (another model, other settings, after a lost ${w.one}), quit and reopen the app.`),
      this.lines, this.notes);
    this.warn();
  }

  /** Says so beside the switch when the ring is on with no other machine in it. */
  private warn(): void {
    const text = noMachinesWarning(this.cluster(), this.w);
    this.warning.textContent = text ?? '';
    this.warning.hidden = text === null;
  }

  private cluster(): ClusterSettings {
    const s = this.settings();
    // settings saved before the setting existed come back with its defaults;
    // this keeps a partial record (a test's mock) working too
    s.cluster ??= { enabled: false, hostfile: '', hosts: [], join_timeout_secs: 120, split: 'auto' };
    s.cluster.split ??= 'auto';
    return s.cluster;
  }

  /** Asks for the rank lines now, and again every CLUSTER_POLL_MS while shown. */
  async refresh(): Promise<void> {
    window.clearTimeout(this.timer);
    this.timer = 0;
    try {
      this.render(await api.clusterStatus());
    } catch (e) {
      clear(this.lines);
      clear(this.notes);
      this.notes.append(h('div', { class: 'error-note', role: 'alert' }, errorText(e)));
    }
    if (this.el.isConnected) this.timer = window.setTimeout(() => void this.refresh(), CLUSTER_POLL_MS);
  }

  render(s: ClusterStatus): void {
    clear(this.lines);
    clear(this.notes);
    if (!s.enabled && s.state === 'not_joined') return;
    for (const l of rankLines(s, this.w)) {
      this.lines.append(h('li', { class: `cluster-rank rank-${l.state}`, 'data-testid': `cluster-rank-${l.rank}`, 'data-state': l.state },
        h('span', { 'data-testid': 'cluster-rank-text' }, l.text),
        l.share ? h('div', { class: 'hint', 'data-testid': 'cluster-rank-share' }, `Holds ${l.share}`) : null,
        l.copyCommand ? h('div', { class: 'hint' }, 'Copy the hostfile and the ring secret to its home folder (this way, or any other): ', h('code', { 'data-testid': 'cluster-rank-copy' }, l.copyCommand)) : null,
        l.command ? h('div', { class: 'hint' }, 'Run there: ', h('code', { 'data-testid': 'cluster-rank-command' }, l.command)) : null));
    }
    for (const n of clusterNotes(s, this.w)) {
      const bad = s.state === 'lost' || s.state === 'failed' || !!s.error;
      this.notes.append(h('div', { class: bad ? 'error-note' : 'note', 'data-testid': 'cluster-note' }, n));
    }
  }
}
