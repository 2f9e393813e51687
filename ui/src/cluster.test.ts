import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks } from '@tauri-apps/api/mocks';
import { ClusterSection, clusterNotes, followerCommand, hostfileName, machineWords, memoryWords, noMachinesWarning, parseHosts, rankLines, shellWord } from './clusterSection';
import type { ClusterStatus } from './bindings/ClusterStatus';
import type { Settings } from './bindings/Settings';

/** The words on a Mac (the suite runs where the user agent is not one). */
const mac = machineWords(true);

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const COMMAND_1 = 'vlm serve --model <the same model folder> --distributed cluster-hostfile.json --rank 1 --split pipeline --ring-secret-file cluster-ring.secret';
const COPY_1 = 'scp /data/cluster-hostfile.json /data/cluster-ring.secret 10.0.0.2:';
const status = (over: Partial<ClusterStatus> = {}): ClusterStatus => ({
  enabled: true, state: 'joined', hostfile_path: '/data/cluster-hostfile.json', secret_path: '/data/cluster-ring.secret', error: null, model_id: 'dir:tiny', restart_needed: false, split: 'pipeline',
  ranks: [
    { rank: 0, addresses: ['10.0.0.1:5000'], this_mac: true, state: over.state ?? 'joined', weights_bytes: null, kv_bytes: null, share: null, command: null, copy_command: null },
    { rank: 1, addresses: ['10.0.0.2:5000'], this_mac: false, state: over.state ?? 'joined', weights_bytes: null, kv_bytes: null, share: null, command: COMMAND_1, copy_command: COPY_1 },
  ],
  ...over,
});

/** A joined pipeline of two with each rank's memory gathered. */
const gathered = (): ClusterStatus => {
  const s = status();
  Object.assign(s.ranks[0], { weights_bytes: 4_250_000_000, kv_bytes: 0, share: 'layers 14..28 of 28, pipeline rank 0 of 2' });
  Object.assign(s.ranks[1], { weights_bytes: 3_900_000_000, kv_bytes: 120_000_000 });
  return s;
};

describe('cluster setting', () => {
  it('reads one host a line, leaving out blank lines', () => {
    expect(parseHosts(' 10.0.0.1:5000\n\n10.0.0.2:5000 \n')).toEqual(['10.0.0.1:5000', '10.0.0.2:5000']);
    expect(parseHosts('')).toEqual([]);
  });

  it('says a line per rank: this Mac first, the others by address', () => {
    expect(rankLines(status(), mac).map((l) => l.text)).toEqual([
      'Rank 0 · this Mac — joined',
      'Rank 1 · 10.0.0.2:5000 — joined',
    ]);
    expect(rankLines(status({ state: 'waiting' }), mac)[1].text).toBe('Rank 1 · 10.0.0.2:5000 — waiting to join…');
  });

  it('shows each rank’s memory once gathered, and this Mac’s share', () => {
    expect(memoryWords({ weights_bytes: null, kv_bytes: null })).toBeNull();
    expect(memoryWords({ weights_bytes: 3_900_000_000, kv_bytes: 120_000_000 })).toBe('3.9 GB weights · 120 MB KV');
    const lines = rankLines(gathered(), mac);
    expect(lines.map((l) => l.text)).toEqual([
      'Rank 0 · this Mac — joined · 4.3 GB weights · 0 B KV',
      'Rank 1 · 10.0.0.2:5000 — joined · 3.9 GB weights · 120 MB KV',
    ]);
    expect(lines[0].share).toBe('layers 14..28 of 28, pipeline rank 0 of 2');
    expect(lines[1].share).toBeNull();
    // joined: nothing left to copy or run on the other Mac
    expect(lines[1].command).toBeNull();
    expect(lines[1].copyCommand).toBeNull();
  });

  it('tells the other Macs what to copy and run, with the same split and the ring secret, until they join', () => {
    expect(followerCommand('N', 'tensor', 'cluster-hostfile.json')).toBe('vlm serve --model <the same model folder> --distributed cluster-hostfile.json --rank N --split tensor --ring-secret-file cluster-ring.secret');
    // the app's command (Rust) and the page's say the same
    expect(followerCommand(1, 'pipeline', 'cluster-hostfile.json')).toBe(COMMAND_1);
    expect(rankLines(status({ state: 'waiting' }), mac)[1].command).toBe(COMMAND_1);
    expect(rankLines(status({ state: 'waiting' }), mac)[1].copyCommand).toBe(COPY_1);
    expect(rankLines(status({ state: 'not_joined' }), mac)[0].command).toBeNull();
    // the hostfile by its own name, as one shell word
    expect(hostfileName({ hostfile: '' })).toBe('cluster-hostfile.json');
    expect(hostfileName({ hostfile: ' /Users/me/ring/my ring.json ' })).toBe('my ring.json');
    expect(followerCommand(2, 'auto', "it's.json")).toContain(` --distributed 'it'\\''s.json' --rank 2 `);
    expect(shellWord('10.0.0.2:')).toBe('10.0.0.2:');
    expect(shellWord('')).toBe("''");
  });

  it('a lost ring says rank 0 cannot tell which, the error, and to restart', () => {
    const lost = status({ state: 'lost', restart_needed: true, error: { code: 'DISTRIBUTED_ERROR', message: 'distributed: another rank of the split model failed' } });
    const notes = clusterNotes(lost, mac);
    expect(notes[0]).toContain('cannot tell which');
    expect(notes[1]).toContain('another rank of the split model failed');
    expect(notes[2]).toContain('quit and reopen the app');
    expect(notes[2]).toContain('--split pipeline');
    expect(clusterNotes(status())).toEqual([]);
  });

  it('edits the draft and shows the lines with their state', () => {
    const draft = { cluster: { enabled: false, hostfile: '', hosts: [], join_timeout_secs: 120, split: 'auto' } } as unknown as Settings;
    const saves: boolean[] = [];
    const section = new ClusterSection(() => draft, (soon) => saves.push(soon), mac);
    document.body.append(section.el);
    const toggle = section.el.querySelector<HTMLInputElement>('[data-testid=setting-cluster-enabled]')!;
    toggle.checked = true;
    toggle.dispatchEvent(new Event('change'));
    const hosts = section.el.querySelector<HTMLTextAreaElement>('[data-testid=setting-cluster-hosts]')!;
    hosts.value = '10.0.0.1:5000\n10.0.0.2:5000\n';
    hosts.dispatchEvent(new Event('input'));
    expect(draft.cluster).toMatchObject({ enabled: true, hosts: ['10.0.0.1:5000', '10.0.0.2:5000'] });
    expect(saves).toEqual([false, true]);

    // how to split: saved at once, and the command for the other Macs follows
    const split = section.el.querySelector<HTMLSelectElement>('[data-testid=setting-cluster-split]')!;
    expect(split.value).toBe('auto');
    expect([...split.options].map((o) => o.textContent)).toEqual(['Auto', 'Tensor parallel', 'Pipeline']);
    expect(section.el.querySelector('#cluster-split-hint')!.textContent).toMatch(/Pipeline: each Mac runs a range of the model’s layers.*Ethernet or Wi‑Fi.*Thunderbolt.*Auto picks tensor parallel/);
    expect(section.el.querySelector('[data-testid=cluster-split-command]')!.textContent).toBe('--split auto');
    split.value = 'pipeline';
    split.dispatchEvent(new Event('change'));
    expect(draft.cluster.split).toBe('pipeline');
    expect(saves).toEqual([false, true, false]);
    expect(section.el.querySelector('[data-testid=cluster-split-command]')!.textContent).toBe('--split pipeline');
    expect(section.el.querySelector('#cluster-enabled-hint')!.textContent).toContain('--distributed cluster-hostfile.json --rank N --split pipeline --ring-secret-file cluster-ring.secret');
    // a hostfile of one's own is named by its name
    const hostfile = section.el.querySelector<HTMLInputElement>('[data-testid=setting-cluster-hostfile]')!;
    hostfile.value = '/Users/me/ring.json';
    hostfile.dispatchEvent(new Event('input'));
    expect(section.el.querySelector('#cluster-enabled-hint')!.textContent).toContain('--distributed ring.json --rank N');
    hostfile.value = '';
    hostfile.dispatchEvent(new Event('input'));

    // waiting: each other Mac's line says what to run there
    section.render(status({ state: 'waiting' }));
    expect(section.el.querySelector('[data-testid=cluster-rank-1] [data-testid=cluster-rank-command]')!.textContent).toBe(COMMAND_1);
    expect(section.el.querySelector('[data-testid=cluster-rank-1] [data-testid=cluster-rank-copy]')!.textContent).toBe(COPY_1);
    expect(section.el.querySelector('[data-testid=cluster-rank-0] [data-testid=cluster-rank-command]')).toBeNull();
    expect(section.el.querySelector('[data-testid=cluster-rank-0] [data-testid=cluster-rank-copy]')).toBeNull();
    // joined: memory on every line, this Mac's share under its own
    section.render(gathered());
    expect(section.el.querySelector('[data-testid=cluster-rank-1] [data-testid=cluster-rank-text]')!.textContent).toBe('Rank 1 · 10.0.0.2:5000 — joined · 3.9 GB weights · 120 MB KV');
    expect(section.el.querySelector('[data-testid=cluster-rank-0] [data-testid=cluster-rank-share]')!.textContent).toBe('Holds layers 14..28 of 28, pipeline rank 0 of 2');
    expect(section.el.querySelectorAll('[data-testid=cluster-rank-share]').length).toBe(1);
    expect(section.el.querySelectorAll('[data-testid=cluster-rank-command], [data-testid=cluster-rank-copy]').length).toBe(0);

    section.render(status({ state: 'lost', error: { code: 'DISTRIBUTED_ERROR', message: 'lost' } }));
    const rank1 = section.el.querySelector<HTMLElement>('[data-testid=cluster-rank-1]')!;
    expect(rank1.dataset.state).toBe('lost');
    expect(rank1.textContent).toBe('Rank 1 · 10.0.0.2:5000 — lost');
    expect(rank1.querySelector('[data-testid=cluster-rank-command]')).toBeNull();
    expect(section.el.querySelectorAll('[data-testid=cluster-note]').length).toBe(2);
    // off and never joined: no lines
    section.render(status({ enabled: false, state: 'not_joined' }));
    expect(section.el.querySelectorAll('li').length).toBe(0);
  });
});

describe('cluster settings saved before the split choice', () => {
  it('reads as auto', () => {
    const draft = { cluster: { enabled: true, hostfile: '', hosts: ['10.0.0.1:5000', '10.0.0.2:5000'], join_timeout_secs: 120 } } as unknown as Settings;
    const section = new ClusterSection(() => draft, () => {});
    expect(section.el.querySelector<HTMLSelectElement>('[data-testid=setting-cluster-split]')!.value).toBe('auto');
    expect(draft.cluster.split).toBe('auto');
  });
});

describe('the words for machines', () => {
  it('say "this computer" and a Linux home folder off a Mac, "this Mac" on one', () => {
    const linux = machineWords(false);
    const draft = { cluster: { enabled: false, hostfile: '', hosts: [], join_timeout_secs: 120, split: 'auto' } } as unknown as Settings;
    const section = new ClusterSection(() => draft, () => {}, linux);
    const text = section.el.textContent!;
    expect(text).not.toMatch(/Mac/);
    expect(text).toContain('this computer is rank 0');
    expect(section.el.querySelector<HTMLInputElement>('[data-testid=setting-cluster-hostfile]')!.placeholder).toBe('/home/me/hostfile.json');
    expect(rankLines(status(), linux)[0].text).toBe('Rank 0 · this computer — joined');
    const onMacSection = new ClusterSection(() => draft, () => {}, mac);
    expect(onMacSection.el.querySelector<HTMLInputElement>('[data-testid=setting-cluster-hostfile]')!.placeholder).toBe('/Users/me/hostfile.json');
  });

  it('warn when the ring is turned on with no other machine, until one is listed', () => {
    const draft = { cluster: { enabled: false, hostfile: '', hosts: [], join_timeout_secs: 120, split: 'auto' } } as unknown as Settings;
    const section = new ClusterSection(() => draft, () => {}, machineWords(false));
    document.body.append(section.el);
    const warning = section.el.querySelector<HTMLElement>('[data-testid=cluster-no-hosts]')!;
    expect(warning.hidden).toBe(true);
    const toggle = section.el.querySelector<HTMLInputElement>('[data-testid=setting-cluster-enabled]')!;
    toggle.checked = true;
    toggle.dispatchEvent(new Event('change'));
    expect(warning.hidden).toBe(false);
    expect(warning.textContent).toMatch(/^No other machines yet/);
    const hosts = section.el.querySelector<HTMLTextAreaElement>('[data-testid=setting-cluster-hosts]')!;
    hosts.value = '10.0.0.1:5000';
    hosts.dispatchEvent(new Event('input'));
    expect(warning.textContent).toMatch(/^Only one host is listed/);
    hosts.value = '10.0.0.1:5000\n10.0.0.2:5000';
    hosts.dispatchEvent(new Event('input'));
    expect(warning.hidden).toBe(true);
    expect(noMachinesWarning({ enabled: true, hostfile: '/home/me/ring.json', hosts: [] })).toBeNull();
  });
});
