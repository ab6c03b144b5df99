//! Evaluation through regorus's RVM (the bundled set under `policy.evaluator = "auto"`, the
//! default, or any set under `"rvm"`): the policy set is compiled once more, to bytecode, and
//! each request runs it in a prepared VM. Measured about 3–4× faster than cloning the
//! interpreter (benches/policy.rs). The differential test in `tests.rs` checks both give the
//! same decisions on the shipped set; an operator's own set runs on the interpreter by default,
//! because regorus 0.14's RVM decides some rules differently (see the test
//! `an_operators_policy_runs_as_policy_test_runs_it_and_the_rvm_defect_is_known`).
//!
//! VMs are kept in a small pool per compiled set: a VM holds the program and `data` already
//! loaded (loading `data` walks the whole document to check it against the rule tree), so a
//! request only sets its input and runs. A reload builds a new set with a new pool; a VM that
//! failed is dropped rather than reused.

use std::sync::{Arc, Mutex};

use regorus::languages::rego::compiler::Compiler;
use regorus::rvm::program::Program;
use regorus::rvm::vm::RegoVM;
use regorus::{CompiledPolicy, Engine, Value};

use super::LoadError;

/// Bound on instructions per evaluation, so a runaway policy fails (policy_error) instead of
/// holding a request thread; far above what the shipped policies use.
const MAX_INSTRUCTIONS: usize = 1_000_000;

/// Idle VMs kept per compiled set: one per concurrently evaluating thread is all that is ever
/// reused; more would only hold memory.
const POOL_MAX: usize = 64;

/// A policy set compiled to RVM bytecode for one query.
pub(crate) struct RvmProgram {
    program: Arc<Program>,
    compiled: CompiledPolicy,
    data: Value,
    idle: Mutex<Vec<RegoVM>>,
}

impl std::fmt::Debug for RvmProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RvmProgram").finish_non_exhaustive()
    }
}

impl RvmProgram {
    /// Compiles `query` of the modules and data already in `engine`.
    pub(crate) fn compile(engine: &mut Engine, query: &str) -> Result<RvmProgram, LoadError> {
        let rule: regorus::Rc<str> = query.into();
        let bad =
            |e: String| LoadError::Compile(format!("policy.evaluator = \"rvm\": {e} (set policy.evaluator = \"interpreter\" to run this policy unchanged)"));
        let compiled = engine.compile_with_entrypoint(&rule).map_err(|e| bad(e.to_string()))?;
        let program = Compiler::compile_from_policy(&compiled, &[query]).map_err(|e| bad(e.to_string()))?;
        let rvm = RvmProgram { program, compiled, data: engine.get_data(), idle: Mutex::new(Vec::new()) };
        // Prepare one VM now: a data/rule conflict is a load error, not a per-request one.
        let vm = rvm.prepare().map_err(bad)?;
        rvm.put_back(vm);
        Ok(rvm)
    }

    /// A VM with the program and data loaded (`default` rules need the compiled policy).
    fn prepare(&self) -> Result<RegoVM, String> {
        let mut vm = RegoVM::new_with_policy(self.compiled.clone());
        vm.set_max_instructions(MAX_INSTRUCTIONS);
        vm.set_execution_timer_config(Some(super::EVALUATION_TIME_LIMIT));
        vm.load_program(self.program.clone());
        vm.set_data(self.data.clone()).map_err(|e| e.to_string())?;
        Ok(vm)
    }

    fn take(&self) -> Result<RegoVM, String> {
        match self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            Some(vm) => Ok(vm),
            None => self.prepare(),
        }
    }

    fn put_back(&self, vm: RegoVM) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < POOL_MAX {
                idle.push(vm);
            }
        }
    }

    /// Evaluates the query for `input`, within `limit`.
    pub(crate) fn eval(&self, input: Value, limit: regorus::utils::limits::ExecutionTimerConfig) -> Result<Value, String> {
        let mut vm = self.take()?;
        vm.set_execution_timer_config(Some(limit));
        vm.set_input(input);
        let result = vm.execute().map_err(|e| e.to_string());
        if result.is_ok() {
            // Drop this request's input now rather than when the VM is next used.
            vm.set_input(Value::Null);
            self.put_back(vm);
        }
        result
    }
}
