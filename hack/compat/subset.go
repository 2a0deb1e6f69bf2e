package main

// The two suites of the subset.
const (
	integration = "integration"
	node        = "node"
)

// feature is a row of the support matrix: the tests that prove it, in one
// suite.
type feature struct {
	name  string
	suite string // integration or node
	tests []string
}

// features is the compatibility subset: what make test-compat runs against
// each minor's kube-apiserver and kube-controller-manager (test/integration)
// and its kubelet (test/node).
var features = []feature{
	{"The version under test: kube-apiserver", integration, []string{"TestApiserverIsTheVersionUnderTest"}},
	{"The version under test: the node's kube-apiserver and kubelet", node, []string{"TestKubeletIsTheVersionUnderTest"}},
	{"Admission conformance: timeouts, reinvocation, v1beta1 reviews, dry-run, the apiserver's defaults", integration, []string{
		"TestSlowWebhook", "TestNoCABundleFailsClosed", "TestReinvocation", "TestAdmissionReviewV1beta1", "TestDryRunStoresNothing",
		"TestDenialReachesClient", "TestWarningsReachClient", "TestDefaultsMatchTheApiserver", "TestDefaultsMatchTheApiserverForMoreShapes",
	}},
	{"Injection, native sidecars, excluded namespaces", integration, []string{
		"TestExamplesInjectIntoStoredPod", "TestNativeSidecarAndExcludedNamespace", "TestSkipEverythingNeverReachesTheWebhook",
	}},
	{"Grants, judged as the Sidecar's author", integration, []string{
		"TestRBACFollowsInjectedPods", "TestClusterRulesAreAnExplicitOptIn", "TestAuthorsAreJudgedAsTheRealRequester",
		"TestAttackForgedReviewsAreNoAuthorizationOracle", "TestReviewEscalateWithoutBindGrantsEverything",
	}},
	{"Attacks on grants: stolen tokens, forged and copied records", integration, []string{
		"TestAttackGrantingIdentityIsHeldToItsObjects", "TestAttackControllerTokenUpdatesOnlyMovesInPlace", "TestAttackControllerTokenRestartsOnly",
		"TestAttackPaddedForgedPodDenied", "TestAttackCopiedRecordReachesConfinedSidecar", "TestAttackStolenTokenWritesWebhooksOfItsOwn",
	}},
	{"Revisions and canaries", integration, []string{"TestRevisionsKeptAndPruned", "TestPartitionHoldsTheHashedHalf"}},
	{"Mandatory Sidecars, and attacks on them", integration, []string{
		"TestMandatorySidecarDeniesEachOptOut", "TestMandatoryNeedsPolicyBindingRights", "TestMandatoryAttackLabelAfterCreate",
		"TestMandatoryAttackLabelThroughPodsStatus", "TestMandatoryAttackLesserAuthorTurnsItOff",
	}},
	{"Webhook scope: only selected pods and guarded records are sent", integration, []string{
		"TestUnselectedPodsNotSent", "TestAttackStolenControllerTokenPodsCondition", "TestValidatingCallOnlyForGuardedRecords",
		"TestDesiredWebhookConfigurationsAreStoredUnchanged",
	}},
	{"Beside the real Kyverno 1.19", integration, []string{"TestCoexistWithKyverno", "TestCoexistWithKyvernoImageDigests"}},
	{"verify: the admission chain, MutatingAdmissionPolicies included", integration, []string{"TestVerifyListsTheAdmissionChain"}},
	{"On the node: an example pod runs injected", node, []string{"TestExamplePod"}},
	{"On the node: a native sidecar is ready before the app starts", node, []string{"TestNativeSidecarIsReadyBeforeTheAppStarts"}},
	{"On the node: in-place upgrade of a sidecar, native too", node, []string{"TestSidecarUpgradedInPlace"}},
	{"On the node: a mandatory agent runs in every pod", node, []string{"TestMandatoryAgentRunsInEveryPod"}},
}
