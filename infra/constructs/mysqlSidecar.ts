import * as ecs from "aws-cdk-lib/aws-ecs";
import type { RoleService } from "./roleService.ts";

/**
 * DBBench's env workers need a MySQL server for their episodes' databases. On ECS each worker task
 * carries its own MySQL 8 as a sidecar: it listens on the task's loopback only (no port mapping,
 * no security-group rule, `--bind-address=127.0.0.1`), keeps its data on the task's ephemeral
 * storage, and the worker reaches it at AGENTRL_MYSQL_URL with the root password from Secrets
 * Manager. The worker itself creates a user per episode granted only that episode's database.
 */

/** The pinned server image (MySQL 8.0, as upstream's `mysql:8` runs it). */
export const MYSQL_SIDECAR_IMAGE = "public.ecr.aws/docker/library/mysql:8.0.40";
export const MYSQL_SIDECAR_URL = "mysql://root@127.0.0.1:3306/";

/** Tasks whose workers need the sidecar: the AgentBench DBBench tasks. */
export function needsMysql(task: string): boolean {
  return task.startsWith("dbbench-");
}

export function addMysqlSidecar(worker: RoleService, rootPassword: ecs.Secret): ecs.ContainerDefinition {
  const sidecar = worker.taskDefinition.addContainer("Mysql", {
    image: ecs.ContainerImage.fromRegistry(MYSQL_SIDECAR_IMAGE),
    essential: true,
    secrets: { MYSQL_ROOT_PASSWORD: rootPassword },
    command: [
      "--bind-address=127.0.0.1",
      "--mysqlx=OFF",
      "--max-connections=1000",
      "--skip-log-bin",
      "--innodb-flush-log-at-trx-commit=0",
    ],
    healthCheck: {
      command: ["CMD-SHELL", 'mysqladmin ping -h 127.0.0.1 -uroot -p"$MYSQL_ROOT_PASSWORD" --silent'],
    },
    portMappings: [],
    logging: ecs.LogDrivers.awsLogs({ streamPrefix: "mysql", logGroup: worker.logGroup }),
  });
  // The worker starts once the server answers, and passes its root password to the worker.
  worker.container.addContainerDependencies({
    container: sidecar,
    condition: ecs.ContainerDependencyCondition.HEALTHY,
  });
  worker.container.addEnvironment("AGENTRL_MYSQL_URL", MYSQL_SIDECAR_URL);
  worker.container.addSecret("AGENTRL_MYSQL_PASSWORD", rootPassword);
  return sidecar;
}
