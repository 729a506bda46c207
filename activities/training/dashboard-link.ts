// Where the dashboard serves a run's page, for the run's Current Details in the Temporal Web UI.
// The dashboard's address is deployment configuration (TROUPE_DASHBOARD_HOST / _PORT) that the
// control worker knows and workflows cannot read, so a run asks once per execution through
// this (local) activity and the answer is recorded in its history: replays show the same link.

export function createDashboardLinkActivities(deps: { dashboardUrl?: string }) {
  return {
    /** The dashboard's base URL, or null where this control worker was given none. */
    async dashboardUrl(): Promise<string | null> {
      return deps.dashboardUrl ?? null;
    },
  };
}

export type DashboardLinkActivities = ReturnType<typeof createDashboardLinkActivities>;
