// A room's other settings, editable while it runs: the page's title and message, its
// status code, the bypass and asset paths, the caps, the breaker, the per-client shares,
// the lottery, closed-loop admission, the proof of work at the door, the shadow line, the
// join limit and the schedule (typed in the operator's time zone, sent as RFC 3339 with its
// offset). Read from `GET …/config` when opened; Apply sends only what was edited (`PUT
// …/config`, under the file's names), and an error the API names is shown under its field.
import { useState } from 'preact/hooks';

import { ApiError, fieldMessage, type Api, type RoomChange, type Settings } from './api';
import { localToRfc3339, rfc3339ToLocal, zoneLabel } from './events';
import { auditNote } from './ui';

type Kind = 'text' | 'long' | 'number' | 'lines' | 'status' | 'bool' | 'challenge' | 'time';

/** The editor's fields: the file's name, its label, and how it is typed. */
const FIELDS: [name: string, label: string, kind: Kind][] = [
  ['title', 'Page title', 'text'],
  ['message', 'Message to visitors', 'long'],
  ['queue_status_code', 'Waiting page status', 'status'],
  ['bypass_paths', 'Bypass paths (one glob a line)', 'lines'],
  ['asset_paths', 'Asset paths (one glob a line)', 'lines'],
  ['max_inflight', 'Max requests at the origin (per replica, 0: no cap)', 'number'],
  ['inflight_wait', 'Wait for an origin slot (e.g. 5s)', 'text'],
  ['stream_cap', 'Max streams to the origin (0: no cap)', 'number'],
  ['max_waiting', 'Max in line (0: no limit)', 'number'],
  ['max_places_per_client', 'Places in line per client (0: no cap)', 'number'],
  ['max_sessions_per_client', 'Sessions per client (0: no cap)', 'number'],
  ['session_clients', 'Clients per session (0: no cap)', 'number'],
  ['lottery', 'Draw by lot before the doors open', 'bool'],
  ['adaptive', 'Adaptive: target origin latency (e.g. 800ms; empty: off)', 'text'],
  ['challenge', 'Proof of work at the door', 'challenge'],
  ['shadow_after', 'Shadow line after this many strikes (0: off)', 'number'],
  ['join_limit_per_ip', 'Newcomers one client may add per window (0: no limit)', 'number'],
  ['join_limit_window', 'Join limit window (e.g. 1m)', 'text'],
  ['schedule.queue_opens_at', 'Schedule: line opens (empty: no time)', 'time'],
  ['schedule.admits_at', 'Schedule: doors open (empty: no time)', 'time'],
  ['schedule.closes_at', 'Schedule: closes (empty: no time)', 'time'],
];

const SCHEDULE = ['queue_opens_at', 'admits_at', 'closes_at'] as const;

/** A setting as the form shows it. */
function shown(s: Settings, name: string): string {
  if (name.startsWith('schedule.')) {
    return rfc3339ToLocal(s.schedule?.[name.slice(9) as (typeof SCHEDULE)[number]]);
  }
  const v = (s as unknown as Record<string, unknown>)[name];
  if (name === 'adaptive') return s.adaptive ? s.adaptive.target_latency : '';
  if (name === 'challenge') return s.challenge.mode;
  if (Array.isArray(v)) return v.join('\n');
  return v === undefined || v === null ? '' : String(v);
}

/** The form's text as the API's value: numbers as numbers where they read as one. */
function value(s: Settings, name: string, kind: Kind, typed: string): RoomChange[string] {
  switch (kind) {
    case 'bool':
      return typed === 'true';
    case 'challenge':
      // The mode only: difficulty and the no-JavaScript wait keep their value.
      return { mode: typed };
    case 'lines':
      return typed
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '');
    case 'number':
    case 'status': {
      const t = typed.trim();
      return /^\d+$/.test(t) ? Number(t) : t;
    }
    default:
      if (name === 'adaptive') {
        const t = typed.trim();
        if (t === '') return false;
        return { ...(s.adaptive ?? {}), target_latency: t };
      }
      return typed;
  }
}

export function SettingsEditor(props: {
  id: string;
  room: string;
  api: Api;
  onUnauthorized: (e: ApiError) => void;
  refresh: () => void;
}) {
  const { id, room, api } = props;
  const [loaded, setLoaded] = useState<Settings | null>(null);
  const [edits, setEdits] = useState<Record<string, string>>({});
  const [error, setError] = useState<{ field: string | null; text: string } | null>(null);
  const [result, setResult] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const fail = (err: unknown) => {
    const e = err instanceof ApiError ? err : new ApiError(0, 'Cannot reach anteroom', String(err));
    if (e.unauthorized) return props.onUnauthorized(e);
    const exact = e.field && FIELDS.some(([n]) => n === e.field) ? e.field : null;
    const base = e.field ? e.field.split(/[[.]/)[0] : null;
    const known = exact ?? (base === 'schedule' ? 'schedule.queue_opens_at' : base && FIELDS.some(([n]) => n === base) ? base : null);
    setError({ field: known, text: known ? fieldMessage(e) : `Not changed: ${e.message}` });
    if (known) document.getElementById(`${id}-set-${known.replace('.', '-')}`)?.focus();
  };

  const load = async () => {
    try {
      setLoaded(await api.settings(room));
      setEdits({});
    } catch (err) {
      fail(err);
    }
  };

  const submit = async (ev: Event) => {
    ev.preventDefault();
    if (!loaded) return;
    const patch: RoomChange = {};
    for (const [name, , kind] of FIELDS) {
      if (kind !== 'time' && edits[name] !== undefined && edits[name] !== shown(loaded, name)) {
        patch[name] = value(loaded, name, kind, edits[name]);
      }
    }
    // The schedule is one setting: sent whole when any of its times was edited, each time
    // as RFC 3339 with the operator's offset (what does not read as one is sent as typed).
    if (SCHEDULE.some((t) => edits[`schedule.${t}`] !== undefined && edits[`schedule.${t}`] !== shown(loaded, `schedule.${t}`))) {
      const schedule: Record<string, string | null> = {};
      for (const t of SCHEDULE) {
        const typed = (edits[`schedule.${t}`] ?? shown(loaded, `schedule.${t}`)).trim();
        schedule[t] = typed === '' ? null : (localToRfc3339(typed) ?? typed);
      }
      patch.schedule = schedule;
    }
    if (Object.keys(patch).length === 0) {
      setResult('Nothing to change.');
      return;
    }
    setBusy(true);
    setError(null);
    setResult(null);
    try {
      const res = await api.configure(room, patch);
      setLoaded(res.settings);
      setEdits({});
      setResult(`Applied ${Object.keys(patch).join(', ')}: in force now.${auditNote(res.audit)}`);
      props.refresh();
    } catch (err) {
      fail(err);
    } finally {
      setBusy(false);
    }
  };

  const input = (name: string, label: string, kind: Kind) => {
    const fid = `${id}-set-${name.replace('.', '-')}`;
    const current = loaded ? shown(loaded, name) : '';
    const v = edits[name] ?? current;
    const invalid = error?.field === name;
    const set = (text: string) => {
      setEdits((e) => ({ ...e, [name]: text }));
      setError(null);
      setResult(null);
    };
    const common = {
      id: fid,
      name,
      'aria-invalid': invalid ? ('true' as const) : undefined,
      'aria-describedby': invalid ? `${fid}-error` : kind === 'time' ? `${id}-set-zone` : undefined,
    };
    const changed = loaded?.changed.includes(name.split('.')[0]);
    return (
      <div class={`cr-field${invalid ? ' cr-field-invalid' : ''}`} key={name}>
        {kind === 'bool' ? (
          <label for={fid}>
            <input
              {...common}
              type="checkbox"
              checked={v === 'true'}
              onChange={(e) => set(String((e.currentTarget as HTMLInputElement).checked))}
            />{' '}
            {label}
          </label>
        ) : (
          <label for={fid}>{label}</label>
        )}
        {(kind === 'text' || kind === 'number') && (
          <input
            {...common}
            type="text"
            inputMode={kind === 'number' ? 'numeric' : undefined}
            autocomplete="off"
            value={v}
            onInput={(e) => set((e.currentTarget as HTMLInputElement).value)}
          />
        )}
        {kind === 'time' && (
          <input
            {...common}
            type="datetime-local"
            step={1}
            value={v}
            onInput={(e) => set((e.currentTarget as HTMLInputElement).value)}
            onChange={(e) => set((e.currentTarget as HTMLInputElement).value)}
          />
        )}
        {(kind === 'long' || kind === 'lines') && (
          <textarea {...common} rows={2} value={v} onInput={(e) => set((e.currentTarget as HTMLTextAreaElement).value)} />
        )}
        {kind === 'status' && (
          <select {...common} value={v} onChange={(e) => set((e.currentTarget as HTMLSelectElement).value)}>
            {['200', '202', '429', '503'].map((c) => (
              <option value={c} key={c}>
                {c}
              </option>
            ))}
          </select>
        )}
        {kind === 'challenge' && (
          <select {...common} value={v} onChange={(e) => set((e.currentTarget as HTMLSelectElement).value)}>
            {[
              ['off', 'Off'],
              ['under_load', 'Only while a line exists'],
              ['always', 'Every newcomer'],
            ].map(([m, text]) => (
              <option value={m} key={m}>
                {text}
              </option>
            ))}
          </select>
        )}
        {changed && <span class="cr-muted cr-changed"> changed from the file</span>}
        {invalid && (
          <p class="cr-field-error" id={`${fid}-error`} data-field-error={name}>
            {error?.text}
          </p>
        )}
      </div>
    );
  };

  return (
    <details
      class="cr-settings"
      onToggle={(e) => {
        if ((e.currentTarget as HTMLDetailsElement).open) void load();
      }}
    >
      <summary>All settings</summary>
      {loaded ? (
        <form onSubmit={submit} noValidate aria-label={`All settings of ${room}`}>
          {FIELDS.map(([name, label, kind]) => input(name, label, kind))}
          <p class="cr-hint" id={`${id}-set-zone`}>
            Schedule times are in your time zone, {zoneLabel()}; the room’s events set them when one becomes current.
          </p>
          <div class="cr-config-buttons">
            <button type="submit" class="cr-btn cr-btn-primary" disabled={busy}>
              {busy ? 'Applying…' : 'Apply settings'}
            </button>
          </div>
          <div role="alert">
            {error && !error.field && <p class="cr-msg cr-msg-error">{error.text}</p>}
            {error?.field && <p class="cr-sr">Not changed: {error.field}: {error.text}</p>}
          </div>
          <div role="status" aria-live="polite">
            {result && <p class="cr-msg cr-msg-ok">{result}</p>}
          </div>
        </form>
      ) : (
        <p class="cr-muted">{error ? error.text : 'Loading…'}</p>
      )}
    </details>
  );
}
