//! The editor's worker pool: started on first use from the settings, rebuilt when they
//! change, its workers' status sent as `kernel-lsp/status`, and refused up front for a
//! language its worker cannot run.

use std::sync::Arc;

use crate::optimize;
use crate::syntax::Lang;
use crate::worker::pool::{self, PoolConfig, WorkerPool};

use super::{Backend, StatusNotification, StatusParams};

impl Backend {
    /// The worker pool (started on first use, rebuilt when the worker settings change).
    async fn pool(&self) -> std::result::Result<Arc<WorkerPool>, String> {
        let (existing, settings) = {
            let st = self.state();
            (st.pool.clone(), st.settings.clone())
        };
        let pool = match existing {
            Some(p) => p,
            None => {
                let config = PoolConfig::from_settings(&settings, &pool::visible_gpus())?;
                let p = Arc::new(WorkerPool::new(config));
                self.state().pool.get_or_insert(p).clone()
            }
        };
        let hello = if pool.size() > 1 {
            // Every worker starts now, so the status lists each one alive or down; the
            // pool works while any one does.
            let all = pool.connect_all().await;
            let first_err = all.iter().find_map(|r| r.as_ref().err().cloned());
            match all.into_iter().find_map(|r| r.ok()) {
                Some(h) => h,
                None => {
                    return Err(first_err.map_or_else(|| "no worker started".into(), |e| e.message))
                }
            }
        } else {
            pool.connect().await.map_err(|e| e.message)?
        };
        let (worker, msg) = match &hello.device {
            Some(d) => (Some(d.name.clone()), String::new()),
            None => (None, format!("no GPU: {}", hello.cuda.message)),
        };
        let workers = if pool.size() > 1 {
            pool.status()
        } else {
            Vec::new()
        };
        if let Ok(mut w) = self.worker_status.lock() {
            *w = (worker.clone(), msg.clone(), workers.clone());
        }
        self.client
            .send_notification::<StatusNotification>(StatusParams {
                worker,
                message: msg,
                job: None,
                workers,
            })
            .await;
        Ok(pool)
    }

    /// The pool, refused up front when its worker cannot run `lang` (no GPU, no Triton).
    pub(super) async fn pool_for(
        &self,
        lang: Lang,
    ) -> std::result::Result<Arc<WorkerPool>, String> {
        let pool = self.pool().await?;
        if let Some(h) = pool.hello() {
            optimize::backend_ready(&h, lang)?;
        }
        Ok(pool)
    }
}
