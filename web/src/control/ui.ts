// What the room tiles and the Queue view share: a notice under a control, the audit note
// appended to it, and the id prefix of a room's elements.

/** A one-line outcome shown under a control. */
export interface Notice {
  kind: 'ok' | 'error';
  text: string;
}

/** The sentence added to an outcome when its audit line was not written. */
export function auditNote(audit: { written: boolean; error?: string } | undefined): string {
  return audit && !audit.written ? ` Not recorded in the audit log: ${audit.error ?? 'write failed'}.` : '';
}

/** The id prefix of room `room`'s elements: unique per tile, safe in an id. */
export function slug(room: string, index: number): string {
  return `cr-r${index}-${room.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}
