//! Recording an admin change: the audit line ([`crate::audit`]) and the `config_changed`
//! event on the side channel. A failed audit write does not undo the change (an operator
//! must be able to pause during a disk incident); what happened to the line goes into the
//! response, so the operator knows.

use serde_json::{Value, json};

use crate::audit::AuditEntry;

use super::api::Audit;
use super::{AdminContext, Caller};

/// Records a change: the audit line (its result goes into the response so an operator
/// knows) and a `config_changed` event on the side channel.
pub(super) async fn audit(
    app: &AdminContext<'_>,
    room: &str,
    action: &'static str,
    old: Value,
    new: Value,
    who: &Caller,
) -> Audit {
    app.admission
        .events()
        .publish(crate::events::Event::config_changed(
            room,
            json!({ "action": action, "old": old.clone(), "new": new.clone() }),
        ));
    let entry = AuditEntry::now(room, action, old, new, who.ip, who.peer).by_token(&who.token);
    write_audit(app, entry).await
}

/// Appends `entry` to the audit log; what the response says about it.
pub(super) async fn write_audit(app: &AdminContext<'_>, entry: AuditEntry) -> Audit {
    match app.admin.audit.append(&entry).await {
        Ok(()) => Audit {
            written: true,
            error: None,
        },
        Err(error) => Audit {
            written: false,
            error: Some(error.to_string()),
        },
    }
}
